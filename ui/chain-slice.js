// A job's place in its chain, as its page draws it (GET /chains/{rid}, docs/chains.md). A small chain is drawn whole; in
// a larger one only a bounded slice around the job is: the root and the job's nearest ancestors, its nearest siblings
// on each side, and its descendants a few generations down, each left-out part counted where it is left out. So a
// chain of a thousand jobs draws about thirty lines, not a tree thousands of pixels long; the chain's page pages them all.
import { count, h, statusBadge } from "./dom.js";

/** The bounds of the slice: how much of the chain around the job is drawn. */
export const SLICE = {
  /** A chain of at most this many jobs, none deeper than WHOLE_DEPTH, is drawn whole. */
  WHOLE_JOBS: 30,
  WHOLE_DEPTH: 6,
  /** Ancestors drawn besides the root: the nearest ones (parent, grandparent). */
  NEAREST_ANCESTORS: 2,
  /** Siblings drawn on each side of the job, the nearest in creation order. */
  SIBLINGS_EACH_SIDE: 3,
  /** Generations of descendants drawn below the job, and children drawn under each of them. */
  DESCENDANT_GENERATIONS: 2,
  CHILDREN_SHOWN: 4,
};

const plural = (n, one, many = `${one}s`) => `${count(n)} ${n === 1 ? one : many}`;

/** What `node` and everything below it count: jobs. */
function sizes(roots) {
  const size = new Map();
  const visit = (node) => {
    let n = 1;
    for (const child of node.children) n += visit(child);
    size.set(node, n);
    return n;
  };
  for (const root of roots) visit(root);
  return size;
}

/** The jobs of `nodes` with everything below them. */
const weight = (nodes, size) => nodes.reduce((sum, node) => sum + size.get(node), 0);

/**
 * What to draw of chain `chain` (GET /chains/{rid}'s `chain`) on the page of job `jobId`: `{ found, whole, total,
 * shown, entries }`. An entry is `{ kind: "job", job, role, hiddenBelow, children }` (role "this", "root", "ancestor",
 * "sibling", "descendant" or "other"; hiddenBelow the jobs under it not drawn) or `{ kind: "gap", what, jobs, below }`
 * (`jobs` of `what` not drawn, with `below` more jobs under them). Pure: the dashboard's test calls it directly.
 */
export function sliceOfChain(chain, jobId) {
  const roots = chain.jobs;
  const size = sizes(roots);
  const parentOf = new Map();
  let here = null;
  let depth = 0;
  const walk = (nodes, parent, level) => {
    for (const node of nodes) {
      parentOf.set(node, parent);
      if (node.job.id === jobId) here = node;
      depth = Math.max(depth, level);
      walk(node.children, node, level + 1);
    }
  };
  walk(roots, null, 0);
  const total = weight(roots, size);
  if (here === null) return { found: false, whole: false, total, shown: 0, entries: [] };

  let shown = 0;
  const jobEntry = (node, role, children, hiddenBelow = 0) => {
    shown++;
    return { kind: "job", job: node.job, role: node === here ? "this" : role, hiddenBelow, children };
  };
  const gap = (what, nodes) => ({ kind: "gap", what, jobs: nodes.length, below: weight(nodes, size) - nodes.length });

  if (total <= SLICE.WHOLE_JOBS && depth < SLICE.WHOLE_DEPTH && !chain.truncated) {
    const all = (node) => jobEntry(node, parentOf.get(node) === null ? "root" : "other", node.children.map(all));
    return { found: true, whole: true, total, shown: total, entries: roots.map(all) };
  }

  // Below the job: a few generations, a few children each, what is cut counted.
  const descendants = (node, generation) => {
    const kids = node.children.slice(0, SLICE.CHILDREN_SHOWN).map((child) => {
      const deeper = generation < SLICE.DESCENDANT_GENERATIONS;
      return jobEntry(
        child,
        "descendant",
        deeper ? descendants(child, generation + 1) : [],
        deeper ? 0 : size.get(child) - 1,
      );
    });
    const rest = node.children.slice(SLICE.CHILDREN_SHOWN);
    return rest.length > 0 ? [...kids, gap("more-children", rest)] : kids;
  };

  // The job among its siblings (the other children of its parent, or the other roots), the nearest on each side.
  const path = [];
  for (let node = parentOf.get(here); node !== null; node = parentOf.get(node)) path.unshift(node);
  const family = path.length === 0 ? roots : path.at(-1).children;
  const at = family.indexOf(here);
  const from = Math.max(0, at - SLICE.SIBLINGS_EACH_SIDE);
  const to = Math.min(family.length, at + SLICE.SIBLINGS_EACH_SIDE + 1);
  const earlier = family.slice(0, from);
  const later = family.slice(to);
  const sibling = (node) =>
    node === here
      ? jobEntry(node, "this", descendants(node, 1))
      : jobEntry(node, path.length === 0 ? "root" : "sibling", [], size.get(node) - 1);
  let level = [
    ...(earlier.length > 0 ? [gap("earlier-siblings", earlier)] : []),
    ...family.slice(from, to).map(sibling),
    ...(later.length > 0 ? [gap("later-siblings", later)] : []),
  ];
  if (path.length === 0) return { found: true, whole: false, total, shown, entries: level };

  // Above it: the parent and grandparent, the ancestors between them and the root counted, then the root. An ancestor's
  // other branches are counted beside it (the parent's are its siblings, drawn or counted above).
  const otherBranches = (node, next) => (node === path.at(-1) ? 0 : size.get(node) - 1 - size.get(next));
  const nearest = path.slice(1).slice(-SLICE.NEAREST_ANCESTORS);
  const skipped = path.slice(1, path.length - nearest.length);
  for (let i = nearest.length - 1; i >= 0; i--) {
    const node = nearest[i];
    level = [jobEntry(node, "ancestor", level, otherBranches(node, i + 1 < nearest.length ? nearest[i + 1] : here))];
  }
  if (skipped.length > 0) {
    const below = skipped.reduce((sum, node, i) => sum + otherBranches(node, skipped[i + 1] ?? nearest[0] ?? here), 0);
    level = [{ kind: "gap", what: "ancestors", jobs: skipped.length, below }, ...level];
  }
  const root = path[0];
  const rootEntry = jobEntry(root, "root", level, otherBranches(root, path[1] ?? here));
  const otherRoots = roots.filter((node) => node !== root);
  return {
    found: true,
    whole: false,
    total,
    shown,
    entries: [rootEntry, ...(otherRoots.length > 0 ? [gap("other-roots", otherRoots)] : [])],
  };
}

/** The words of a gap: how many jobs of what are left out here. */
function gapText({ what, jobs, below }) {
  const words = {
    ancestors: `${plural(jobs, "more ancestor")} not shown`,
    "earlier-siblings": `${plural(jobs, "earlier sibling")} not shown`,
    "later-siblings": `${plural(jobs, "later sibling")} not shown`,
    "more-children": `${plural(jobs, "more child", "more children")} not shown`,
    "other-roots": `${plural(jobs, "other root")} of the chain not shown`,
  }[what];
  const under = what === "ancestors" ? "in their other branches" : "below them";
  return `… ${words}${below > 0 ? `, with ${plural(below, "job")} ${under}` : ""}`;
}

/**
 * The chain of `job` as its page draws it (see `sliceOfChain`): `jobHref(id)` links a job, `chainHref` is the chain's
 * page opened where the job is, `listHref` the job list filtered to the chain.
 */
export function chainSliceView({ job, chain, jobHref, chainHref, listHref }) {
  const slice = sliceOfChain(chain, job.id);
  const node = (entry) => {
    if (entry.kind === "gap") return h("li", { class: "gap muted" }, gapText(entry));
    const here = entry.role === "this";
    // The job itself as its page last read it: a large chain is read less often than the job.
    const j = here ? job : entry.job;
    const label = [
      statusBadge(j.status),
      " ",
      here
        ? h("strong", { "aria-current": "true" }, j.operation_id, " ", h("code", {}, j.id), " (this job)")
        : h("a", { href: jobHref(j.id), "data-focus-key": `tree-${j.id}` }, j.operation_id, " ", h("code", {}, j.id)),
      entry.role === "root" ? h("span", { class: "muted" }, " · root") : null,
      entry.hiddenBelow > 0
        ? h("span", { class: "muted hidden-below" }, ` · ${plural(entry.hiddenBelow, "job")} below not shown`)
        : null,
    ];
    return h(
      "li",
      { class: here ? "here" : "" },
      h("span", { class: "node" }, label),
      entry.children.length > 0 ? h("ul", {}, entry.children.map(node)) : null,
    );
  };
  const total = Object.values(chain.counts).reduce((sum, n) => sum + n, 0);
  const what = slice.whole
    ? `All ${plural(total, "job")} of the chain.`
    : slice.found
      ? `${count(slice.shown)} of the chain's ${plural(total, "job")} drawn: the root, this job's nearest ancestors and siblings, and its descendants ${SLICE.DESCENDANT_GENERATIONS} generations down. The chain's page shows every job.`
      : `This job is not among the newest ${count(slice.total)} jobs of the chain's answer, so its place is not drawn here; the chain's page lists those.`;
  return [
    h(
      "div",
      { class: "chain-head" },
      h("span", { class: "muted" }, "Chain id (original_request_id)"),
      h("code", { class: "chain-id", id: "chain-id" }, job.original_request_id),
      h(
        "p",
        {},
        h(
          "a",
          { href: chainHref, "data-focus-key": "chain-page", id: "chain-page" },
          `The chain's page (${plural(total, "job")}, waterfall)`,
        ),
        " · ",
        h("a", { href: listHref, "data-focus-key": "chain-list", id: "chain-list" }, "List its jobs"),
      ),
      h("p", { class: "muted", id: "chain-drawn" }, what),
    ),
    slice.entries.length > 0
      ? h("ul", { class: "tree", "aria-label": `Chain ${job.original_request_id}` }, slice.entries.map(node))
      : null,
  ];
}

/**
 * The slice of a chain a job's page draws (ui/chain-slice.js), without a browser: the module's rule reads only the
 * chain's answer. Whatever the chain's shape, the slice is bounded, holds the job, and every job of the chain is either
 * drawn or counted once where it is left out.
 */
import assert from "node:assert/strict";
import { describe, test } from "node:test";

interface WireNode {
  job: { id: string; status: string; operation_id: string };
  attempts: unknown[];
  children: WireNode[];
}
type Entry =
  | { kind: "job"; job: { id: string }; role: string; hiddenBelow: number; children: Entry[] }
  | { kind: "gap"; what: string; jobs: number; below: number };
interface Slice {
  found: boolean;
  whole: boolean;
  total: number;
  shown: number;
  entries: Entry[];
}

// The dashboard's modules are plain browser JavaScript, loaded here by address (they carry no type declarations).
const { sliceOfChain, SLICE } = (await import(new URL("../../ui/chain-slice.js", import.meta.url).href)) as {
  sliceOfChain: (chain: { jobs: WireNode[]; truncated: boolean }, jobId: string) => Slice;
  SLICE: Record<string, number>;
};

/** A chain from a list of parents (an index into the list, or null for a root): the answer's tree. */
function chainOf(parents: Array<number | null>, truncated = false): { jobs: WireNode[]; truncated: boolean } {
  const nodes = parents.map((_, i): WireNode => ({
    job: { id: `j${i}`, status: "pending", operation_id: "op" },
    attempts: [],
    children: [],
  }));
  const roots: WireNode[] = [];
  parents.forEach((parent, i) =>
    (parent === null ? roots : (nodes[parent] as WireNode).children).push(nodes[i] as WireNode),
  );
  return { jobs: roots, truncated };
}

/** Every job the slice draws, and every job it counts as left out. */
function accounted(entries: Entry[]): { drawn: string[]; counted: number } {
  let counted = 0;
  const drawn: string[] = [];
  const visit = (entry: Entry): void => {
    if (entry.kind === "gap") {
      counted += entry.jobs + entry.below;
      return;
    }
    drawn.push(entry.job.id);
    counted += entry.hiddenBelow;
    entry.children.forEach(visit);
  };
  entries.forEach(visit);
  return { drawn, counted };
}

/** A small deterministic generator, so a failing shape can be run again. */
function generator(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

/** The most jobs a slice draws, from its bounds: the root and nearest ancestors, the siblings, two generations below. */
const children = SLICE["CHILDREN_SHOWN"] ?? 0;
const MOST_JOBS =
  1 + (SLICE["NEAREST_ANCESTORS"] ?? 0) + (2 * (SLICE["SIBLINGS_EACH_SIDE"] ?? 0) + 1) + children + children * children;

describe("the slice of a chain on a job's page", () => {
  test("draws a small chain whole", () => {
    const slice = sliceOfChain(chainOf([null, 0, 0, 1, 3]), "j3");
    assert.equal(slice.whole, true);
    assert.deepEqual(accounted(slice.entries), { drawn: ["j0", "j1", "j3", "j4", "j2"], counted: 0 });
  });

  test("draws a chain too deep to draw whole as a slice, even when it is small", () => {
    const line = [null, 0, 1, 2, 3, 4, 5, 6];
    const slice = sliceOfChain(chainOf(line), "j7");
    assert.equal(slice.whole, false);
    assert.deepEqual(accounted(slice.entries).drawn, ["j0", "j5", "j6", "j7"]);
    assert.deepEqual(slice.entries[0]?.kind === "job" ? slice.entries[0].children[0] : undefined, {
      kind: "gap",
      what: "ancestors",
      jobs: 4,
      below: 0,
    });
  });

  test("counts the other branches of the ancestors it leaves out, and the other roots", () => {
    // j0 → j1 → j2 → j3 → j4 (the job); j1 has another child j5 with a child j6; a second root j7; 40 children of j4.
    const parents: Array<number | null> = [null, 0, 1, 2, 3, 1, 5, null, ...Array.from({ length: 40 }, () => 4)];
    const slice = sliceOfChain(chainOf(parents), "j4");
    const [root, others] = slice.entries;
    assert.equal(
      root?.kind === "job" && root.children[0]?.kind === "gap" ? root.children[0].below : undefined,
      2,
      "j5 and j6, under j1",
    );
    assert.deepEqual(others, { kind: "gap", what: "other-roots", jobs: 1, below: 0 });
    assert.equal(slice.shown + accounted(slice.entries).counted, slice.total);
  });

  test("says a job missing from a truncated answer is not found", () => {
    const slice = sliceOfChain(chainOf([null, 0], true), "j-older");
    assert.deepEqual([slice.found, slice.entries.length, slice.total], [false, 0, 2]);
  });

  test("for any shape: a bounded slice holding the job, every other job drawn once or counted once", () => {
    const random = generator(29);
    for (let run = 0; run < 300; run++) {
      const size = 1 + Math.floor(random() * 400);
      const roots = 1 + Math.floor(random() * 3);
      // Some shapes deep (a parent among the last few jobs), some wide (a parent among the first few).
      const deep = random() < 0.5;
      const parents = Array.from({ length: size }, (_, i) =>
        i < roots ? null : deep ? Math.max(0, i - 1 - Math.floor(random() * 3)) : Math.floor(random() * Math.min(i, 8)),
      );
      const chain = chainOf(parents);
      const jobId = `j${Math.floor(random() * size)}`;
      const slice = sliceOfChain(chain, jobId);
      const { drawn, counted } = accounted(slice.entries);
      const shape = `run ${run}: ${size} jobs, ${deep ? "deep" : "wide"}, job ${jobId}`;
      assert.equal(slice.total, size, shape);
      assert.ok(drawn.includes(jobId), `${shape}: the job is drawn`);
      assert.equal(new Set(drawn).size, drawn.length, `${shape}: no job drawn twice`);
      assert.equal(drawn.length, slice.shown, shape);
      assert.equal(drawn.length + counted, size, `${shape}: every job drawn or counted`);
      if (!slice.whole)
        assert.ok(drawn.length <= MOST_JOBS, `${shape}: ${drawn.length} jobs drawn, at most ${MOST_JOBS}`);
    }
  });
});

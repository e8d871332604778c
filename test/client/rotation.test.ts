/**
 * docs/tokens.md, "Rotating keys", followed step by step with jobs in flight: real opqueue nodes (one after another on
 * one SQLite file; on PostgreSQL, old and new node side by side on one schema for a moment, as in a rolling restart),
 * real product instances behind the client's Fastify plugin, and a load balancer in front of each side, so that a
 * step can redeploy the product or restart opqueue with another `auth.delivery_key` while deliveries are running.
 *
 * At every step three jobs are in flight across it: one whose delivery the product holds (running), one the product
 * answered 503 (retrying, its next attempt signed anew after the step), one delayed past the step. Every one must end
 * `succeeded`, and the product must never have answered 401. The runbook's waits ("until no token signed with the old
 * key can still arrive", "until the products' cached key sets hold the new key") become events here: the node that
 * signed with the old key has stopped and its last delivery has been answered; a product instance started after the
 * key was published. Time moves only through a ManualClock shared by the nodes (started at the real time, since the
 * product checks `exp` on its own clock), so nothing waits for time to pass.
 *
 * The enqueue and admin keys' runbook is followed too: every call is accepted at every step, and a job enqueued before
 * the rotation is delivered after it.
 */
import assert from "node:assert/strict";
import { createServer, request as forward } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import Fastify from "fastify";
import { decodeProtectedHeader, exportPKCS8, generateKeyPair } from "jose";
import { mintToken } from "../../src/auth/tokens.js";
import { ManualClock } from "../../src/clock.js";
import { createJobsClient, opqueueDelivery, type DeliveryKeyOptions, type JobsClient } from "@opqueue/client";
import { waitForStatus } from "../helpers/delivery.js";
import { startTestService, TEST_ENGINE, type TestService } from "../helpers/service.js";
import { deferred } from "../helpers/target.js";

type TestContext = { after: (fn: () => Promise<void>) => void };

/** Upper bound of a wait for a request to arrive; far above what a passing test needs. */
const WAIT_LIMIT_MS = 10_000;
/** Backoff: with jitter 0.5 the retry of a 503 is due 750 ms after it, well before the delayed jobs. */
const RETRY = { base_ms: 1000, factor: 2, max_ms: 60_000, retry_after_max_ms: 600_000 };
/** How far past a step the delayed job of that step is due; the clock is moved by as much once the step is done. */
const DELAY_MS = 60_000;
/** A poll fallback that never fires during a test: only an enqueue or a wake starts a delivery. */
const NEVER_POLL_MS = 3_600_000;

/** The kid of a bearer token's header, or undefined. */
function kidOf(authorization: string | undefined): string | undefined {
  const token = /^Bearer (\S+)$/.exec(authorization ?? "")?.[1];
  if (token === undefined) return undefined;
  const { kid } = decodeProtectedHeader(token);
  return typeof kid === "string" ? kid : undefined;
}

/** A front that forwards each request to the instance deployed behind it at that moment, as a load balancer does. */
interface Balancer {
  url: string;
  /** Sends the requests still to come to `upstream` (requests on their way stay with the instance they reached). */
  route(upstream: string): void;
  /** Every answer that came back through it, with the kid of the request's token. */
  answers: Array<{ kid: string | undefined; status: number }>;
  /** The kids of the requests forwarded and not answered yet. */
  unanswered: Map<number, string | undefined>;
}

async function startBalancer(t: TestContext): Promise<Balancer> {
  let upstream = "";
  let next = 0;
  const answers: Balancer["answers"] = [];
  const unanswered: Balancer["unanswered"] = new Map();
  const server = createServer((req, res) => {
    const id = next++;
    const kid = kidOf(req.headers.authorization);
    unanswered.set(id, kid);
    const onward = forward(`${upstream}${req.url ?? "/"}`, { method: req.method, headers: req.headers }, (answer) => {
      unanswered.delete(id);
      answers.push({ kid, status: answer.statusCode ?? 0 });
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    onward.on("error", (error) => {
      unanswered.delete(id);
      if (!res.headersSent) res.writeHead(502);
      res.end(String(error));
    });
    req.pipe(onward);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    route(to) {
      upstream = to;
    },
    answers,
    unanswered,
  };
}

/** Deliveries a product holds, by job id, until the test releases them. */
class Holds {
  private readonly arrivals = new Map<string, ReturnType<typeof deferred<void>>>();
  private readonly releases = new Map<string, ReturnType<typeof deferred<void>>>();

  private entry(map: Map<string, ReturnType<typeof deferred<void>>>, jobId: string): ReturnType<typeof deferred<void>> {
    const existing = map.get(jobId);
    if (existing) return existing;
    const created = deferred<void>();
    map.set(jobId, created);
    return created;
  }

  /** Called by the product's handler: resolves once the test releases job `jobId`. */
  hold(jobId: string): Promise<void> {
    this.entry(this.arrivals, jobId).resolve();
    return this.entry(this.releases, jobId).promise;
  }

  /** Resolves once the delivery of job `jobId` is being held. */
  async arrived(jobId: string): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(
        () => reject(new Error(`the delivery of job ${jobId} never reached the product`)),
        WAIT_LIMIT_MS,
      );
    });
    try {
      await Promise.race([this.entry(this.arrivals, jobId).promise, limit]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Lets the held delivery of job `jobId` answer. */
  release(jobId: string): void {
    this.entry(this.releases, jobId).resolve();
  }

  /** Lets every held delivery answer: a failed test must not leave a product or a node waiting on one. */
  releaseAll(): void {
    for (const release of this.releases.values()) release.resolve();
  }
}

/** One deployment of the product: a Fastify app whose background route sits behind `opqueueDelivery`. */
interface ProductInstance {
  name: string;
  url: string;
  /** The kid of every delivery token its plugin accepted (the handler runs only for those). */
  acceptedKids: Set<string | undefined>;
}

/**
 * Starts a product instance verifying deliveries with `keys`. Its `sendWelcomeEmail` holds the deliveries of users
 * `held-*` until released, answers 503 to the first attempt for users `retried-*`, and 204 otherwise.
 */
async function startProduct(
  t: TestContext,
  options: { name: string; keys: DeliveryKeyOptions; holds: Holds },
): Promise<ProductInstance> {
  const acceptedKids = new Set<string | undefined>();
  const app = Fastify({ logger: false });
  await app.register(async (background) => {
    await background.register(opqueueDelivery, { audience: "product", ...options.keys });
    background.post<{ Params: { userId: string } }>(
      "/users/:userId/welcome-email",
      { schema: { operationId: "sendWelcomeEmail" } },
      async (req, reply) => {
        acceptedKids.add(kidOf(req.headers.authorization));
        const delivery = req.delivery;
        assert.ok(delivery, "the plugin sets request.delivery");
        if (req.params.userId.startsWith("held-")) await options.holds.hold(delivery.jobId);
        if (req.params.userId.startsWith("retried-") && delivery.attempt === 1) {
          return reply.code(503).send({ code: "busy", message: "try again later" });
        }
        return reply.code(204).send();
      },
    );
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  t.after(async () => {
    // Closing waits for the requests in progress, a held one too.
    options.holds.releaseAll();
    await app.close();
  });
  return { name: options.name, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, acceptedKids };
}

/** An opqueue node listening on an ephemeral port, its worker running. */
interface Node extends TestService {
  url: string;
}

/**
 * Starts a node with `deliveryKey` (and `keys` as `auth.keys`, if given) delivering to `targetUrl`; on `database`, the
 * one of an earlier node, if given.
 */
async function startNode(options: {
  clock: ManualClock;
  targetUrl: string;
  deliveryKey: unknown;
  keys?: unknown[];
  database?: string;
}): Promise<Node> {
  const s = await startTestService({
    clock: options.clock,
    random: () => 0.5,
    configure: (raw) => {
      raw["target"] = { base_url: options.targetUrl, audience: "product" };
      (raw["auth"] as Record<string, unknown>)["delivery_key"] = options.deliveryKey;
      if (options.keys !== undefined) (raw["auth"] as Record<string, unknown>)["keys"] = options.keys;
      raw["retry"] = RETRY;
      raw["worker"] = { poll_ms: NEVER_POLL_MS };
      // A stopping node waits for its held delivery, which the test releases at once: the grace is only a bound.
      raw["shutdown"] = { grace_ms: WAIT_LIMIT_MS };
      // No cron: moving the clock must deliver only the jobs of the test.
      raw["cron"] = [];
      if (options.database !== undefined) raw["database"] = options.database;
    },
  });
  try {
    await s.service.app.listen({ host: "127.0.0.1", port: 0 });
  } catch (error) {
    await s.close();
    throw error;
  }
  s.service.start();
  return { ...s, url: `http://127.0.0.1:${(s.service.app.server.address() as AddressInfo).port}` };
}

/** The jobs in flight across one step: running (held by the product), retrying, and delayed past the step. */
interface InFlight {
  held: string;
  retried: string;
  delayed: string;
}

/** One step of the runbook: what changes, and what must hold after it. */
interface Step {
  /** The step as docs/tokens.md says it. */
  name: string;
  /** The product is redeployed with these keys (given opqueue's address, for `jwksUrl`). */
  product?: (opqueueUrl: string) => DeliveryKeyOptions;
  /** opqueue is restarted with this `auth.delivery_key`. */
  deliveryKey?: unknown;
  /** Checked before the step: no token of this kid may still be on its way (docs/tokens.md: wait until then). */
  retires?: string;
  /** The kids `/.well-known/jwks.json` serves after the step, in order; null for a 404 (every key HS256). */
  jwks: string[] | null;
}

/** A rotation from start to end. */
interface Runbook {
  /** The product's keys before the rotation. */
  product: (opqueueUrl: string) => DeliveryKeyOptions;
  /** `auth.delivery_key` before the rotation. */
  deliveryKey: unknown;
  jwks: string[] | null;
  steps: Step[];
}

/**
 * Follows `runbook` with jobs in flight across every step, asserts that every job succeeded without a 401, and
 * returns the product instances (their accepted kids) in deployment order.
 */
async function followRunbook(t: TestContext, runbook: Runbook): Promise<ProductInstance[]> {
  const clock = new ManualClock(Date.now());
  const holds = new Holds();
  // First of the cleanups: a test failing mid-step leaves deliveries held, which the nodes' shutdown would wait for.
  t.after(async () => holds.releaseAll());
  const productFront = await startBalancer(t);
  const opqueueFront = await startBalancer(t);
  const products: ProductInstance[] = [];
  const nodes: Node[] = [];
  // The last node first: the first one owns the database (its folder, or its PostgreSQL schema) and removes it.
  t.after(async () => {
    for (const node of [...nodes].reverse()) await node.close();
  });

  const deployProduct = async (name: string, keys: (opqueueUrl: string) => DeliveryKeyOptions) => {
    const product = await startProduct(t, { name, keys: keys(opqueueFront.url), holds });
    products.push(product);
    productFront.route(product.url);
  };
  const startNodeWith = async (deliveryKey: unknown) => {
    const database = nodes[0]?.config.database;
    const node = await startNode({
      clock,
      targetUrl: productFront.url,
      deliveryKey,
      ...(database ? { database } : {}),
    });
    nodes.push(node);
    return node;
  };
  const checkJwks = async (expected: string[] | null, when: string) => {
    const answer = await fetch(`${opqueueFront.url}/.well-known/jwks.json`);
    if (expected === null) {
      assert.equal(answer.status, 404, when);
      return;
    }
    const { keys } = (await answer.json()) as { keys: Array<{ kid: string }> };
    assert.deepEqual(
      keys.map((key) => key.kid),
      expected,
      `the JWKS ${when}`,
    );
  };

  await deployProduct("before the rotation", runbook.product);
  let node = await startNodeWith(runbook.deliveryKey);
  opqueueFront.route(node.url);
  await checkJwks(runbook.jwks, "before the rotation");
  // Enqueues as a product does, with assertions minted on the nodes' clock (it runs ahead of the real one).
  const jobs: JobsClient = createJobsClient({
    baseUrl: opqueueFront.url,
    sign: (claims) =>
      mintToken({
        auth: node.config.auth,
        clock,
        sub: claims.sub,
        op: claims.op,
        ...(claims.rid === undefined ? {} : { rid: claims.rid }),
      }),
  });
  const enqueued: string[] = [];
  const enqueue = async (userId: string, delayMs?: number) => {
    const { job } = await jobs.enqueue({
      caller: { userId: "u1", operationId: "createUser", requestId: `rotation-${userId}` },
      operationId: "sendWelcomeEmail",
      request: { path_params: { userId } },
      ...(delayMs === undefined ? {} : { delayMs }),
    });
    enqueued.push(job.id);
    return job.id;
  };
  const arrange = async (step: number): Promise<InFlight> => {
    const held = await enqueue(`held-${step}`);
    await holds.arrived(held);
    const retried = await enqueue(`retried-${step}`);
    await waitForStatus(node, retried, "retrying");
    const delayed = await enqueue(`delayed-${step}`, DELAY_MS);
    return { held, retried, delayed };
  };
  /** The in-flight jobs end: the held one was answered during the step; the others come due now, on the new side. */
  const finish = async (inFlight: InFlight) => {
    await waitForStatus(node, inFlight.held, "succeeded");
    clock.advance(DELAY_MS);
    node.service.worker?.dispatcher.wake();
    await waitForStatus(node, inFlight.retried, "succeeded");
    await waitForStatus(node, inFlight.delayed, "succeeded");
  };

  let inFlight = await arrange(0);
  for (const [index, step] of runbook.steps.entries()) {
    if (step.retires !== undefined) {
      const onTheirWay = [...productFront.unanswered.values()];
      assert.ok(!onTheirWay.includes(step.retires), `${step.name}: a token of ${step.retires} is still on its way`);
    }
    if (step.product) await deployProduct(step.name, step.product);
    if (step.deliveryKey === undefined) {
      holds.release(inFlight.held);
    } else {
      const previous = node;
      if (TEST_ENGINE === "postgres") {
        // A rolling restart: the new node runs beside the old one, whose held delivery answers meanwhile.
        node = await startNodeWith(step.deliveryKey);
        opqueueFront.route(node.url);
        holds.release(inFlight.held);
        await previous.service.close();
      } else {
        // One SQLite file has one node: the old one stops (its held delivery answers within the shutdown grace),
        // then the new one opens the file.
        const closing = previous.service.close();
        holds.release(inFlight.held);
        await closing;
        node = await startNodeWith(step.deliveryKey);
        opqueueFront.route(node.url);
      }
    }
    await checkJwks(step.jwks, `after "${step.name}"`);
    await finish(inFlight);
    inFlight = await arrange(index + 1);
  }
  holds.release(inFlight.held);
  await finish(inFlight);

  const refused = productFront.answers.filter((answer) => answer.status !== 204 && answer.status !== 503);
  assert.deepEqual(refused, [], "the product answered every delivery 204, or 503 as told");
  assert.equal(
    productFront.answers.filter((answer) => answer.status === 503).length,
    runbook.steps.length + 1,
    "one 503 per retried job",
  );
  const stored = await node.service.store.jobList({ limit: 100 });
  assert.equal(stored.length, enqueued.length);
  for (const job of stored) assert.equal(job.status, "succeeded", `job ${job.id} ${JSON.stringify(job.result)}`);
  return products;
}

/** The HS256 delivery keys of the rotation, as `auth.delivery_key` lists them. */
const OLD_SECRET = {
  kid: "delivery-2025",
  alg: "HS256",
  secret: "the-old-delivery-secret-of-32-bytes-or-more",
} as const;
const NEW_SECRET = {
  kid: "delivery-2026",
  alg: "HS256",
  secret: "the-new-delivery-secret-of-32-bytes-or-more",
} as const;
/** A key as a product's verifier takes it. */
const asSecret = (key: { kid: string; secret: string }) => ({ kid: key.kid, secret: key.secret });

describe("rotating the delivery key (docs/tokens.md, 'Rotating keys')", () => {
  test("HS256: products accept both keys, opqueue signs with the new one, then both drop the old one; no job in flight dies", async (t) => {
    const products = await followRunbook(t, {
      deliveryKey: OLD_SECRET,
      product: () => ({ secret: OLD_SECRET.secret }),
      jwks: null,
      steps: [
        {
          name: "1. the products accept the old key and the new one",
          product: () => ({ secrets: [asSecret(NEW_SECRET), asSecret(OLD_SECRET)] }),
          jwks: null,
        },
        { name: "2. opqueue signs with the new key", deliveryKey: [NEW_SECRET, OLD_SECRET], jwks: null },
        {
          name: "3. the old key is dropped on both sides",
          retires: OLD_SECRET.kid,
          product: () => ({ secrets: [asSecret(NEW_SECRET)] }),
          deliveryKey: [NEW_SECRET],
          jwks: null,
        },
      ],
    });
    assert.deepEqual(
      products.map((product) => [product.name, [...product.acceptedKids].sort()]),
      [
        ["before the rotation", [OLD_SECRET.kid]],
        ["1. the products accept the old key and the new one", [OLD_SECRET.kid, NEW_SECRET.kid].sort()],
        ["3. the old key is dropped on both sides", [NEW_SECRET.kid]],
      ],
    );
  });

  test("EdDSA with the JWKS: the new key is published first and signs later, then the old one is dropped; no job in flight dies", async (t) => {
    const [oldPair, newPair] = await Promise.all([
      generateKeyPair("EdDSA", { extractable: true }),
      generateKeyPair("EdDSA", { extractable: true }),
    ]);
    const oldKey = { kid: "delivery-ed-2025", alg: "EdDSA", private_key: await exportPKCS8(oldPair.privateKey) };
    const newKey = { kid: "delivery-ed-2026", alg: "EdDSA", private_key: await exportPKCS8(newPair.privateKey) };
    const fromJwks = (opqueueUrl: string) => ({ jwksUrl: `${opqueueUrl}/.well-known/jwks.json` });
    const products = await followRunbook(t, {
      deliveryKey: oldKey,
      product: fromJwks,
      jwks: [oldKey.kid],
      steps: [
        { name: "1. opqueue publishes the new key", deliveryKey: [oldKey, newKey], jwks: [oldKey.kid, newKey.kid] },
        // The runbook's wait for every product's cached key set to be refreshed: an instance started now fetches it.
        { name: "2. the products' key sets hold the new key", product: fromJwks, jwks: [oldKey.kid, newKey.kid] },
        { name: "3. opqueue signs with the new key", deliveryKey: [newKey, oldKey], jwks: [newKey.kid, oldKey.kid] },
        { name: "4. opqueue drops the old key", retires: oldKey.kid, deliveryKey: [newKey], jwks: [newKey.kid] },
      ],
    });
    assert.deepEqual(
      products.map((product) => [product.name, [...product.acceptedKids].sort()]),
      [
        ["before the rotation", [oldKey.kid]],
        ["2. the products' key sets hold the new key", [oldKey.kid, newKey.kid].sort()],
      ],
    );
  });

  test("out of order, a product that drops the old key while opqueue still signs with it answers 401, and the job ends dead", async (t) => {
    // What the runbook prevents, so that the tests above could see it: a delivery signed with a key the product no
    // longer accepts.
    const clock = new ManualClock(Date.now());
    const holds = new Holds();
    const front = await startBalancer(t);
    front.route((await startProduct(t, { name: "old", keys: { secret: OLD_SECRET.secret }, holds })).url);
    const node = await startNode({ clock, targetUrl: front.url, deliveryKey: OLD_SECRET });
    t.after(() => node.close());
    const token = await node.assertion({ rid: "rotation-out-of-order" });
    const enqueued = await node.inject({
      method: "POST",
      url: "/jobs",
      token,
      payload: { operation_id: "sendWelcomeEmail", request: { path_params: { userId: "retried-0" } } },
    });
    assert.equal(enqueued.statusCode, 201, enqueued.body);
    const jobId = (enqueued.json() as { job: { id: string } }).job.id;
    await waitForStatus(node, jobId, "retrying");

    front.route((await startProduct(t, { name: "new only", keys: { secrets: [asSecret(NEW_SECRET)] }, holds })).url);
    clock.advance(DELAY_MS);
    node.service.worker?.dispatcher.wake();
    const dead = await waitForStatus(node, jobId, "dead");
    assert.equal(dead.result?.status_code, 401);
    assert.equal(dead.result?.terminal_reason, "permanent-status");
    assert.equal(
      JSON.parse(dead.result?.error_body ?? "{}").message,
      'invalid delivery token: unknown kid "delivery-2025"',
    );
    assert.deepEqual(
      front.answers.map((answer) => [answer.kid, answer.status]),
      [
        [OLD_SECRET.kid, 503],
        [OLD_SECRET.kid, 401],
      ],
    );
  });
});

/** The HS256 enqueue and admin keys of the rotation, as `auth.keys` lists them. */
const OLD_ISSUER = { kid: "issuer-2025", alg: "HS256", secret: "the-old-enqueue-secret-of-32-bytes-or-more" } as const;
const NEW_ISSUER = { kid: "issuer-2026", alg: "HS256", secret: "the-new-enqueue-secret-of-32-bytes-or-more" } as const;

describe("rotating enqueue and admin keys (docs/tokens.md, 'Rotating keys')", () => {
  test("add the new key, move the issuers, remove the old one: every enqueue and admin call is accepted, and a job delayed across the rotation is delivered", async (t) => {
    const clock = new ManualClock(Date.now());
    const target = await startBalancer(t);
    const holds = new Holds();
    target.route((await startProduct(t, { name: "product", keys: { secret: OLD_SECRET.secret }, holds })).url);
    const nodes: Node[] = [];
    t.after(async () => {
      for (const node of [...nodes].reverse()) await node.close();
    });
    const front = await startBalancer(t);
    /** Restarts opqueue with `keys` as `auth.keys` (a rolling restart on PostgreSQL; one node after the other on SQLite). */
    const restartWith = async (keys: unknown[]) => {
      const previous = nodes.at(-1);
      const database = nodes[0]?.config.database;
      if (previous && TEST_ENGINE === "sqlite") await previous.service.close();
      const node = await startNode({
        clock,
        targetUrl: target.url,
        deliveryKey: OLD_SECRET,
        ...(database ? { database } : {}),
        keys,
      });
      nodes.push(node);
      front.route(node.url);
      if (previous && TEST_ENGINE === "postgres") await previous.service.close();
      return node;
    };
    /** A product's (or an admin issuer's) signer holding `key` alone, on the nodes' clock, which the test moves. */
    const issuer = (key: typeof OLD_ISSUER | typeof NEW_ISSUER) => {
      const auth = () => ({ ...(nodes.at(-1) as Node).config.auth, keys: [key] });
      return createJobsClient({
        baseUrl: front.url,
        sign: (claims) =>
          mintToken({
            auth: auth(),
            clock,
            sub: claims.sub,
            op: claims.op,
            ...(claims.rid === undefined ? {} : { rid: claims.rid }),
          }),
        adminToken: () => mintToken({ auth: auth(), clock, sub: `admin-of-${key.kid}`, siteAdmin: true }),
      });
    };
    const oldIssuer = issuer(OLD_ISSUER);
    const newIssuer = issuer(NEW_ISSUER);
    const enqueue = async (client: JobsClient, userId: string, delayMs?: number) =>
      (
        await client.enqueue({
          caller: { userId: "u1", operationId: "createUser", requestId: `rotation-${userId}` },
          operationId: "sendWelcomeEmail",
          request: { path_params: { userId } },
          ...(delayMs === undefined ? {} : { delayMs }),
        })
      ).job.id;

    // Before: the old key alone. A job is delayed past the whole rotation.
    await restartWith([OLD_ISSUER]);
    const delayed = await enqueue(oldIssuer, "delayed-across", 10 * DELAY_MS);
    assert.equal((await oldIssuer.get(delayed)).status, "pending");

    // 1. Add the new key beside the old one: both are accepted.
    await restartWith([OLD_ISSUER, NEW_ISSUER]);
    await enqueue(oldIssuer, "step-1-old");
    await enqueue(newIssuer, "step-1-new");
    assert.equal((await oldIssuer.get(delayed)).id, delayed);
    assert.equal((await newIssuer.get(delayed)).id, delayed);

    // 2. Move the issuers to the new key; `opqueue token` signs with the first HS256 key, so it is listed first.
    const node = await restartWith([NEW_ISSUER, OLD_ISSUER]);
    const minted = await mintToken({ auth: node.config.auth, clock, sub: "ops", siteAdmin: true });
    assert.equal(decodeProtectedHeader(minted).kid, NEW_ISSUER.kid);
    await enqueue(newIssuer, "step-2");

    // 3. Remove the old key once no token it signed is still valid (an assertion lives at most 300 s).
    clock.advance(300_000 + 1000);
    await restartWith([NEW_ISSUER]);
    await enqueue(newIssuer, "step-3");
    await assert.rejects(oldIssuer.get(delayed), (error: unknown) => (error as { status?: number }).status === 401);

    // The job enqueued before the rotation is delivered after it.
    clock.advance(10 * DELAY_MS);
    nodes.at(-1)?.service.worker?.dispatcher.wake();
    const last = nodes.at(-1) as Node;
    await waitForStatus(last, delayed, "succeeded");
    const stored = await last.service.store.jobList({ limit: 100 });
    assert.equal(stored.length, 5);
    for (const job of stored) await waitForStatus(last, job.id, "succeeded");
    assert.ok(target.answers.every((answer) => answer.status === 204));
  });
});

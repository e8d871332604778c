/**
 * The client library `@opqueue/client` against a real service over real HTTP: enqueue with minted assertions,
 * typed errors, 503 retries, admin calls with paging, and the target side (delivery verification with the
 * Fastify plugin, the Express-style middleware and a JWKS URL; automatic chaining; answers that steer the
 * outcome of an attempt). Every test starts its own service on an ephemeral port and its own target app, and
 * waits for what happens (a delivery finishing, a request arriving), never for time to pass.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import Fastify, { type FastifyInstance, type FastifyReply } from "fastify";
import { exportJWK, exportPKCS8, generateKeyPair, SignJWT, type CryptoKey } from "jose";
import {
  ChainMismatchError,
  DedupeConflictError,
  IdempotencyKeyReusedError,
  InvalidAssertionError,
  InvalidOnBehalfOfError,
  InvalidRequestError,
  JobNotCancellableError,
  JobNotFoundError,
  JobNotWaitingError,
  JobNotRetryableError,
  JobRunningError,
  MissingPathParamError,
  InvalidPathParamError,
  OnBehalfOfNotAllowedError,
  OperationNotBackgroundError,
  OperationNotFoundError,
  OpqueueError,
  PayloadTooLargeError,
  PER_PROCESS_REQUEST_ID_WARNING,
  RequestSchemaMismatchError,
  SiteAdminRequiredError,
  SpawnCapExceededError,
  TriggerNotAllowedError,
  UnauthenticatedError,
  UnavailableError,
  UnknownOperationError,
  alwaysRetry,
  authUnresolvable,
  createDeliveryVerifier,
  createJobsClient,
  currentDelivery,
  deliveryAbortSignal,
  DeliveryTokenError,
  neverRetry,
  opqueueDelivery,
  opqueueDeliveryMiddleware,
  runInDelivery,
  verifyDelivery,
  type AssertionClaims,
  type Authority,
  type DeliveryContext,
  type DeliveryExpectation,
  type DeliveryMiddlewareOptions,
  type DeliveryVerifierOptions,
  type Job,
  type JobsClient,
  type JobsClientOptions,
} from "@opqueue/client";
import { startLiveService, type LiveService } from "../helpers/live-service.js";
import { TEST_DELIVERY_SECRET, TEST_SECRET } from "../helpers/service.js";
import { deferred } from "../helpers/target.js";

type After = { after: (fn: () => Promise<void>) => void };

/** The test config's HS256 key, as a product would hand it to the client. */
const SIGN = { kid: "k1", secret: TEST_SECRET } as const;
/** A root caller: user u1 in createUser, request signup-1. */
const CALLER = { userId: "u1", operationId: "createUser", requestId: "signup-1" } as const;
/** The target side's verifier options for the test config. */
const DELIVERY_OPTIONS = { secret: TEST_DELIVERY_SECRET, audience: "product" } as const;
/** Fastify route options declaring the operationId a background route implements, as the plugin requires. */
const implementing = (operationId: string) => ({ schema: { operationId } });

/** A client of `s` signing with the test key and calling admin routes as a site admin. */
function clientOf(s: LiveService, extra: Partial<JobsClientOptions> = {}): JobsClient {
  return createJobsClient({ baseUrl: s.url, sign: SIGN, adminToken: () => s.adminToken(), ...extra });
}

/** The arguments of a `sendWelcomeEmail` enqueue (its path needs `userId`). */
function welcomeEmail(userId = "42") {
  return { operationId: "sendWelcomeEmail", request: { path_params: { userId } } };
}

/** A delivery context as the target would see it for `job`'s attempt `attempt`. */
function deliveryOf(job: Job, attempt = 1): DeliveryContext {
  return {
    jobId: job.id,
    attempt,
    userId: job.user_id,
    operationId: job.operation_id,
    originalRequestId: job.original_request_id,
    authority: job.authority,
  };
}

/**
 * Asserts that `actual` is the delivery `expected` as the plugin or the middleware hands it to the handler: the same
 * fields, and a signal of its own, not aborted while the request lasts.
 */
function assertDelivery(actual: DeliveryContext | undefined, expected: DeliveryContext): void {
  assert.ok(actual, "a delivery");
  const { signal, ...fields } = actual;
  assert.deepEqual(withoutToken(fields), expected);
  assert.ok(signal instanceof AbortSignal, "the delivery carries its signal");
  assert.equal(signal.aborted, false);
}

/**
 * A verified delivery without its `token` (the delivery token it was sent with, which every verified delivery carries for
 * a target that takes it asynchronously), so it compares with a context built from the job; `token`, when given, is the
 * one it must carry.
 */
function withoutToken(delivery: DeliveryContext, token?: string): DeliveryContext {
  const { token: carried, ...fields } = delivery;
  assert.equal(typeof carried, "string", "a verified delivery carries its token");
  if (token !== undefined) assert.equal(carried, token);
  return fields;
}

/** Asserts that `call` rejects with an `ErrorClass` (an `OpqueueError`) carrying `status` and `code`. */
async function assertRefused(
  call: Promise<unknown>,
  ErrorClass: typeof OpqueueError,
  status: number,
  code: string,
): Promise<OpqueueError> {
  let caught: unknown;
  await assert.rejects(call, (error: unknown) => {
    caught = error;
    return true;
  });
  assert.ok(caught instanceof ErrorClass, `expected a ${ErrorClass.name}, got ${String(caught)}`);
  assert.ok(caught instanceof OpqueueError);
  assert.equal(caught.name, ErrorClass.name);
  assert.equal(caught.status, status, caught.message);
  assert.equal(caught.code, code, caught.message);
  assert.ok(caught.message.length > 0, "the service's message is kept");
  return caught;
}

/** Starts a Fastify target app on 127.0.0.1 whose background routes sit behind `opqueueDelivery`. */
async function startFastifyTarget(
  t: After,
  options: DeliveryVerifierOptions,
  routes: (background: FastifyInstance) => void,
): Promise<string> {
  const app = Fastify({ logger: false });
  await app.register(async (background) => {
    await background.register(opqueueDelivery, options);
    routes(background);
  });
  await app.listen({ host: "127.0.0.1", port: 0 });
  t.after(() => app.close());
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
}

/** Starts a plain node:http target on 127.0.0.1 answering with `handler`. */
async function startHttpTarget(
  t: After,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<string> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A service delivering to `targetUrl`, its worker running. */
function startDeliveringService(t: After, targetUrl: string, configure?: (raw: Record<string, unknown>) => void) {
  return startLiveService(t, {
    worker: true,
    configure: (raw) => {
      raw["target"] = { base_url: targetUrl, audience: "product" };
      configure?.(raw);
    },
  });
}

/** Reads a whole request body. */
async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/**
 * A delivery token for `delivery`, signed as opqueue signs them (or with `secret`/`audience` changed, another `kid`
 * in the header or none (`kid: null`), or signed with an EdDSA/ES256 `privateKey` instead of a secret).
 */
function deliveryToken(
  delivery: DeliveryContext,
  options: {
    secret?: string;
    audience?: string;
    kid?: string | null;
    privateKey?: { alg: "EdDSA" | "ES256"; key: CryptoKey };
  } = {},
): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({
    op: delivery.operationId,
    job: delivery.jobId,
    att: delivery.attempt,
    rid: delivery.originalRequestId,
    authority: delivery.authority,
    jti: `${delivery.jobId}:${delivery.attempt}`,
  })
    .setProtectedHeader({
      alg: options.privateKey?.alg ?? "HS256",
      ...(options.kid === null ? {} : { kid: options.kid ?? "q1" }),
      typ: "JWT",
    })
    .setIssuer("opqueue")
    .setAudience(options.audience ?? "product")
    .setSubject(delivery.userId)
    .setIssuedAt(now)
    .setExpirationTime(now + 90)
    .sign(options.privateKey?.key ?? new TextEncoder().encode(options.secret ?? TEST_DELIVERY_SECRET));
}

/** The headers opqueue sends with a delivery of `delivery` carrying `token` (docs/delivery.md, "The delivery request"). */
function deliveryHeaders(delivery: DeliveryContext, token: string): Record<string, string> {
  return {
    authorization: `Bearer ${token}`,
    "idempotency-key": delivery.jobId,
    "x-request-id": delivery.originalRequestId,
    "x-job-id": delivery.jobId,
    "x-job-attempt": String(delivery.attempt),
  };
}

/** A delivery context that no service made, for target-only checks. */
const SAMPLE_DELIVERY: DeliveryContext = {
  jobId: "job_sample_0001",
  attempt: 2,
  userId: "u1",
  operationId: "sendWelcomeEmail",
  originalRequestId: "req-1",
  authority: { kind: "request", request_id: "req-1", user_id: "u1" },
};

/** Delivery headers for SAMPLE_DELIVERY whose authorization a target must refuse, each with what is wrong with it. */
async function badAuthorizations(): Promise<Array<{ what: string; headers: Record<string, string> }>> {
  // Everything but the token matches, so the token alone is what gets refused.
  const { authorization: _none, ...bound } = deliveryHeaders(SAMPLE_DELIVERY, "");
  const token = await deliveryToken(SAMPLE_DELIVERY);
  const withToken = (authorization: string) => ({ ...bound, authorization });
  return [
    { what: "no token", headers: bound },
    { what: "not a JWT", headers: withToken("Bearer not-a-token") },
    { what: "another scheme", headers: withToken(`Basic ${token}`) },
    {
      what: "a wrong secret",
      headers: withToken(
        `Bearer ${await deliveryToken(SAMPLE_DELIVERY, { secret: "another-secret-that-is-32-bytes-long!!" })}`,
      ),
    },
    {
      what: "a wrong audience",
      headers: withToken(`Bearer ${await deliveryToken(SAMPLE_DELIVERY, { audience: "opqueue" })}`),
    },
  ];
}

describe("enqueue", () => {
  test("enqueue with an HS256 key and a caller creates the job (created: true); the same dedupe key again deduplicates it (created: false)", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);

    const first = await client.enqueue({ ...welcomeEmail(), caller: CALLER, dedupeKey: "welcome:42", priority: 3 });
    assert.equal(first.created, true);
    assert.equal(first.job.status, "pending");
    assert.equal(first.job.operation_id, "sendWelcomeEmail");
    assert.equal(first.job.user_id, "u1");
    assert.equal(first.job.original_request_id, "signup-1");
    assert.equal(first.job.enqueued_by_operation_id, "createUser");
    assert.equal(first.job.parent_job_id, null);
    assert.equal(first.job.priority, 3);
    assert.equal(first.job.dedupe_key, "welcome:42");
    assert.deepEqual(first.job.authority, { kind: "request", request_id: "signup-1", user_id: "u1" });
    assert.deepEqual(first.job.request, { path_params: { userId: "42" } });

    const again = await client.enqueue({
      operationId: "sendWelcomeEmail",
      request: { path_params: { userId: "42" }, body: { second: true } },
      caller: CALLER,
      dedupeKey: "welcome:42",
    });
    assert.equal(again.created, false);
    assert.equal(again.job.id, first.job.id);
    assert.deepEqual(again.job.request, { path_params: { userId: "42" }, body: { second: true } });
    assert.equal((await s.service.store.jobList({ limit: 10 })).length, 1, "no second job was created");
  });

  test("enqueue with an idempotencyKey answers the same job again (replayed), and IdempotencyKeyReusedError for another request", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const first = await client.enqueue({
      ...welcomeEmail(),
      caller: CALLER,
      idempotencyKey: "signup-1:welcome",
      ttlMs: 3_600_000,
    });
    assert.deepEqual([first.created, first.replayed], [true, false]);
    const again = await client.enqueue({
      ...welcomeEmail(),
      caller: CALLER,
      idempotencyKey: "signup-1:welcome",
      ttlMs: 3_600_000,
    });
    assert.deepEqual([again.created, again.replayed, again.job.id], [false, true, first.job.id]);
    await assert.rejects(
      client.enqueue({ ...welcomeEmail("43"), caller: CALLER, idempotencyKey: "signup-1:welcome" }),
      IdempotencyKeyReusedError,
    );
    const extensions = await client.extensions(first.job.id);
    assert.equal(extensions.rate_key, null);
    assert.ok(extensions.expires_at !== null && Date.parse(extensions.expires_at) > Date.now());
  });

  test("enqueueBatch answers each item in order, a refused item as the typed error enqueue would throw", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const results = await client.enqueueBatch(
      [
        welcomeEmail("1"),
        { operationId: "noSuchOperation", request: {} },
        welcomeEmail("2"),
        { ...welcomeEmail("3"), idempotencyKey: "k" },
      ],
      { caller: CALLER, traceparent },
    );
    assert.deepEqual(
      results.map((result) => result.ok),
      [true, false, true, true],
    );
    const refused = results[1];
    assert.ok(refused && !refused.ok && refused.error instanceof UnknownOperationError);
    const created = results[0];
    assert.ok(created?.ok && created.created && !created.replayed);
    assert.equal((await client.extensions(created.id)).traceparent, traceparent);
    const replay = await client.enqueueBatch([{ ...welcomeEmail("3"), idempotencyKey: "k" }], { caller: CALLER });
    assert.ok(replay[0]?.ok && replay[0].replayed);
    await assert.rejects(client.enqueueBatch([], { caller: CALLER }), /1 to 1000 items/);
  });

  test("enqueue sends the options as the contract's fields: delay_ms, run_at, concurrency_key, on_behalf_of", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const before = Date.now();
    const delayed = await client.enqueue({
      ...welcomeEmail(),
      caller: CALLER,
      delayMs: 60_000,
      concurrencyKey: "user:42",
    });
    assert.ok(Date.parse(delayed.job.run_at) >= before + 60_000, delayed.job.run_at);
    assert.equal(delayed.job.concurrency_key, "user:42");

    const runAt = new Date(Date.UTC(2030, 0, 2, 3, 4, 5, 678));
    const scheduled = await client.enqueue({ ...welcomeEmail(), caller: CALLER, runAt });
    assert.equal(scheduled.job.run_at, "2030-01-02T03:04:05.678Z");

    const authority: Authority = { kind: "resource", resource_id: "import-7", resource_kind: "import", user_id: "u9" };
    const imported = await client.enqueue({
      ...welcomeEmail("u9"),
      caller: { userId: "admin-1", operationId: "importUsers", requestId: "import-7" },
      onBehalfOf: { userId: "u9", authority },
    });
    assert.equal(imported.job.user_id, "u9");
    assert.deepEqual(imported.job.authority, authority);
  });

  test("a token function given as `sign` receives the caller's claims, and the token it returns is the one sent", async (t) => {
    const s = await startLiveService(t);
    const received: AssertionClaims[] = [];
    const client = createJobsClient({
      baseUrl: s.url,
      sign: async (claims) => {
        received.push(claims);
        // The service's own minting, so the token is valid only if these claims reach it.
        return s.assertion({
          sub: claims.sub,
          op: claims.op,
          ...(claims.rid === undefined ? {} : { rid: claims.rid }),
        });
      },
    });
    const { job, created } = await client.enqueue({
      ...welcomeEmail(),
      caller: { userId: "u7", operationId: "createUser", requestId: "signup-7" },
    });
    assert.equal(created, true);
    assert.deepEqual(received, [{ sub: "u7", op: "createUser", rid: "signup-7" }]);
    assert.equal(job.user_id, "u7");
    assert.equal(job.original_request_id, "signup-7");

    const refusing = createJobsClient({ baseUrl: s.url, sign: () => "not-a-token" });
    await assertRefused(
      refusing.enqueue({ ...welcomeEmail(), caller: CALLER }),
      InvalidAssertionError,
      401,
      "invalid_assertion",
    );
  });

  test("enqueue outside a delivery without `caller` throws before calling the service", async (t) => {
    const s = await startLiveService(t);
    let calls = 0;
    const client = clientOf(s, {
      fetch: (input, init) => {
        calls++;
        return fetch(input, init);
      },
    });
    await assert.rejects(client.enqueue(welcomeEmail()), /caller/);
    assert.equal(calls, 0);
  });
});

describe("errors of the client's own setup", () => {
  test("a missing adminToken or sign, or a failing token function, surfaces as that error, not as a network error, and nothing is sent", async (t) => {
    const s = await startLiveService(t);
    let calls = 0;
    const counting: typeof fetch = (input, init) => {
      calls++;
      return fetch(input, init);
    };
    const bare = createJobsClient({ baseUrl: s.url, fetch: counting });
    for (const [call, pattern] of [
      [bare.get("some_job_0001"), /adminToken/],
      [bare.listPage(), /adminToken/],
      [bare.enqueue({ ...welcomeEmail(), caller: CALLER }), /sign/],
    ] as const) {
      await assert.rejects(call, (error: unknown) => {
        assert.ok(!(error instanceof OpqueueError), `not an OpqueueError: ${String(error)}`);
        assert.match((error as Error).message, pattern);
        return true;
      });
    }
    const failure = new Error("the key service is down");
    const failing = createJobsClient({
      baseUrl: s.url,
      fetch: counting,
      sign: () => Promise.reject(failure),
      adminToken: () => Promise.reject(failure),
    });
    await assert.rejects(failing.enqueue({ ...welcomeEmail(), caller: CALLER }), (error: unknown) => error === failure);
    await assert.rejects(failing.get("some_job_0001"), (error: unknown) => error === failure);
    assert.equal(calls, 0);
  });

  test("a service that does not answer surfaces as OpqueueError network_error with status 0", async (t) => {
    const s = await startLiveService(t);
    const url = s.url;
    await s.service.app.close();
    const error = await assertRefused(
      createJobsClient({ baseUrl: url, sign: SIGN }).enqueue({ ...welcomeEmail(), caller: CALLER }),
      OpqueueError,
      0,
      "network_error",
    );
    assert.match(error.message, /did not answer/);
  });

  test("a network error names the call's URL and the cause (ECONNREFUSED and the address), not fetch's bare \"fetch failed\"", async () => {
    // A port that was just free: a listener opened and closed, so the connection is refused.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const error = await assertRefused(
      createJobsClient({ baseUrl: `http://127.0.0.1:${port}/`, adminToken: "t", retries: 0 }).get("some_job_0001"),
      OpqueueError,
      0,
      "network_error",
    );
    assert.equal(
      error.message,
      `opqueue did not answer GET http://127.0.0.1:${port}/jobs/some_job_0001: ECONNREFUSED 127.0.0.1:${port}`,
    );
    assert.doesNotMatch(error.message, /fetch failed/);
    assert.ok(error.cause instanceof Error, "the error fetch threw is kept as the cause");

    // What fetch throws for a name that does not resolve, and for refusals on every address of a name (happy eyeballs).
    const thrown = (cause: Error) => () => Promise.reject(new TypeError("fetch failed", { cause }));
    const notFound = Object.assign(new Error("getaddrinfo ENOTFOUND opqueue.internal"), {
      code: "ENOTFOUND",
      hostname: "opqueue.internal",
    });
    const refused = (address: string) =>
      Object.assign(new Error(`connect ECONNREFUSED ${address}:8081`), { code: "ECONNREFUSED", address, port: 8081 });
    const everyAddress = Object.assign(new AggregateError([refused("::1"), refused("127.0.0.1")], ""), {
      code: "ECONNREFUSED",
    });
    for (const [cause, expected] of [
      [notFound, "ENOTFOUND opqueue.internal"],
      [everyAddress, "ECONNREFUSED ::1:8081, ECONNREFUSED 127.0.0.1:8081"],
    ] as const) {
      const failing = createJobsClient({
        baseUrl: "http://opqueue.internal:8081",
        adminToken: "t",
        fetch: thrown(cause),
      });
      const other = await assertRefused(failing.cancel("some_job_0001"), OpqueueError, 0, "network_error");
      assert.equal(
        other.message,
        `opqueue did not answer POST http://opqueue.internal:8081/jobs/some_job_0001/cancel: ${expected}`,
      );
    }
  });
});

describe("typed errors of enqueue", () => {
  const cases: Array<{
    when: string;
    ErrorClass: typeof OpqueueError;
    status: number;
    code: string;
    configure?: (raw: Record<string, unknown>) => void;
    run: (s: LiveService, client: JobsClient) => Promise<unknown>;
  }> = [
    {
      when: "the body breaks the schema (a fractional priority)",
      ErrorClass: InvalidRequestError,
      status: 400,
      code: "invalid_request",
      run: (_s, client) => client.enqueue({ ...welcomeEmail(), caller: CALLER, priority: 1.5 }),
    },
    {
      when: "the request payload is over 16384 bytes of JSON",
      ErrorClass: PayloadTooLargeError,
      status: 400,
      code: "payload_too_large",
      run: (_s, client) =>
        client.enqueue({
          operationId: "sendWelcomeEmail",
          request: { path_params: { userId: "42" }, body: "x".repeat(17_000) },
          caller: CALLER,
        }),
    },
    {
      when: "on_behalf_of's authority names another user",
      ErrorClass: InvalidOnBehalfOfError,
      status: 400,
      code: "invalid_on_behalf_of",
      run: (_s, client) =>
        client.enqueue({
          ...welcomeEmail(),
          caller: { userId: "admin-1", operationId: "importUsers", requestId: "import-1" },
          onBehalfOf: { userId: "u9", authority: { kind: "request", request_id: "r", user_id: "u8" } },
        }),
    },
    {
      when: "a path parameter of the target is missing",
      ErrorClass: MissingPathParamError,
      status: 400,
      code: "missing_path_param",
      run: (_s, client) => client.enqueue({ operationId: "sendWelcomeEmail", request: { body: {} }, caller: CALLER }),
    },
    {
      when: "a path parameter of the target is '..', which would reach another route",
      ErrorClass: InvalidPathParamError,
      status: 400,
      code: "invalid_path_param",
      run: (_s, client) =>
        client.enqueue({ operationId: "sendWelcomeEmail", request: { path_params: { userId: ".." } }, caller: CALLER }),
    },
    {
      when: "the assertion is signed with a wrong secret",
      ErrorClass: InvalidAssertionError,
      status: 401,
      code: "invalid_assertion",
      run: (s) =>
        createJobsClient({
          baseUrl: s.url,
          sign: { kid: "k1", secret: "a-wrong-secret-that-is-also-32-bytes-long" },
        }).enqueue({
          ...welcomeEmail(),
          caller: CALLER,
        }),
    },
    {
      when: "the assertion is made for another audience",
      ErrorClass: InvalidAssertionError,
      status: 401,
      code: "invalid_assertion",
      run: (s) =>
        createJobsClient({ baseUrl: s.url, sign: { ...SIGN, audience: "product" } }).enqueue({
          ...welcomeEmail(),
          caller: CALLER,
        }),
    },
    {
      when: "the trigger map does not let the caller enqueue the target",
      ErrorClass: TriggerNotAllowedError,
      status: 403,
      code: "trigger_not_allowed",
      run: (_s, client) =>
        client.enqueue({ operationId: "recordEmailSent", request: { path_params: { emailId: "e1" } }, caller: CALLER }),
    },
    {
      when: "a caller not listed under on_behalf_of sends it",
      ErrorClass: OnBehalfOfNotAllowedError,
      status: 403,
      code: "on_behalf_of_not_allowed",
      run: (_s, client) =>
        client.enqueue({
          ...welcomeEmail(),
          caller: CALLER,
          onBehalfOf: { userId: "u9", authority: { kind: "request", request_id: "r", user_id: "u9" } },
        }),
    },
    {
      when: "a chained call names a job of another operation",
      ErrorClass: ChainMismatchError,
      status: 403,
      code: "chain_mismatch",
      run: async (_s, client) => {
        const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER });
        // A delivery claiming to be of recordEmailSent (which may enqueue buildReport), for a sendWelcomeEmail job.
        const claimed = { ...deliveryOf(job), operationId: "recordEmailSent" };
        return runInDelivery(claimed, () => client.enqueue({ operationId: "buildReport", request: { body: {} } }));
      },
    },
    {
      when: "the target is not in the OpenAPI document",
      ErrorClass: UnknownOperationError,
      status: 422,
      code: "unknown_operation",
      run: (_s, client) => client.enqueue({ operationId: "noSuchOperation", request: {}, caller: CALLER }),
    },
    {
      when: "the target lacks the background tag",
      ErrorClass: OperationNotBackgroundError,
      status: 422,
      code: "operation_not_background",
      run: (_s, client) =>
        client.enqueue({ operationId: "getUser", request: { path_params: { userId: "42" } }, caller: CALLER }),
    },
    {
      when: "the request breaks the target's own schemas",
      ErrorClass: RequestSchemaMismatchError,
      status: 422,
      code: "request_schema_mismatch",
      configure: (raw) => {
        raw["openapi"] = fileURLToPath(new URL("../fixtures/request-schemas.openapi.yaml", import.meta.url));
        raw["triggers"] = { createUser: ["listReports"] };
        raw["on_behalf_of"] = [];
        raw["operations"] = {};
        raw["cron"] = [];
      },
      run: (_s, client) =>
        client.enqueue({ operationId: "listReports", request: { query: { limit: "many" } }, caller: CALLER }),
    },
    {
      when: "a pending job of another operation holds the dedupe key",
      ErrorClass: DedupeConflictError,
      status: 409,
      code: "dedupe_conflict",
      run: async (_s, client) => {
        await client.enqueue({ ...welcomeEmail(), caller: CALLER, dedupeKey: "shared" });
        return client.enqueue({
          operationId: "buildReport",
          request: { body: {} },
          caller: CALLER,
          dedupeKey: "shared",
        });
      },
    },
    {
      when: "the chain already has spawn_cap jobs",
      ErrorClass: SpawnCapExceededError,
      status: 429,
      code: "spawn_cap_exceeded",
      configure: (raw) => {
        raw["limits"] = { spawn_cap: 1 };
      },
      run: async (_s, client) => {
        await client.enqueue({ ...welcomeEmail("1"), caller: CALLER });
        return client.enqueue({ ...welcomeEmail("2"), caller: CALLER });
      },
    },
  ];
  for (const { when, ErrorClass, status, code, configure, run } of cases) {
    test(`enqueue throws ${ErrorClass.name} (${status} ${code}) when ${when}`, async (t) => {
      const s = await startLiveService(t, configure ? { configure } : {});
      const error = await assertRefused(run(s, clientOf(s)), ErrorClass, status, code);
      assert.equal(error.retryAfterSeconds, undefined, "only a 503 carries retryAfterSeconds");
    });
  }
});

describe("typed errors of admin calls", () => {
  test("admin calls with a bad token throw UnauthenticatedError, and without site_admin SiteAdminRequiredError", async (t) => {
    const s = await startLiveService(t);
    const { job } = await clientOf(s).enqueue({ ...welcomeEmail(), caller: CALLER });
    const strangers = createJobsClient({ baseUrl: s.url, adminToken: "not-a-token" });
    const users = createJobsClient({ baseUrl: s.url, adminToken: () => s.adminToken({ siteAdmin: false }) });
    for (const [client, ErrorClass, status, code] of [
      [strangers, UnauthenticatedError, 401, "unauthenticated"],
      [users, SiteAdminRequiredError, 403, "site_admin_required"],
    ] as const) {
      await assertRefused(client.get(job.id), ErrorClass, status, code);
      await assertRefused(client.listPage(), ErrorClass, status, code);
      await assertRefused(client.cancel(job.id), ErrorClass, status, code);
      await assertRefused(client.retry(job.id), ErrorClass, status, code);
      await assertRefused(client.cancelChain("req-1"), ErrorClass, status, code);
    }
    assert.equal((await clientOf(s).get(job.id)).status, "pending");
  });

  test("admin calls on a missing job throw JobNotFoundError", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    await assertRefused(client.get("no_such_job_0001"), JobNotFoundError, 404, "job_not_found");
    await assertRefused(client.cancel("no_such_job_0001"), JobNotFoundError, 404, "job_not_found");
    await assertRefused(client.retry("no_such_job_0001"), JobNotFoundError, 404, "job_not_found");
  });

  test("cancel of a running job throws JobRunningError, of a terminal one JobNotCancellableError; retry of a pending one JobNotRetryableError", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const { job: running } = await client.enqueue({ ...welcomeEmail("1"), caller: CALLER, priority: 1 });
    // The worker is not started: claim the job as a dispatcher would.
    const claimed = await s.service.store.jobClaimMany({ limit: 1 });
    assert.equal(claimed[0]?.id, running.id);
    await assertRefused(client.cancel(running.id), JobRunningError, 409, "job_running");

    const { job: pending } = await client.enqueue({ ...welcomeEmail("2"), caller: CALLER });
    await assertRefused(client.retry(pending.id), JobNotRetryableError, 409, "job_not_retryable");
    await client.cancel(pending.id);
    await assertRefused(client.cancel(pending.id), JobNotCancellableError, 409, "job_not_cancellable");
  });
});

describe("503 unavailable", () => {
  /** A fetch answering 503 `unavailable` (Retry-After: 0) to the first `failures` calls, then the real service. */
  function flakyFetch(failures: number): { fetch: typeof fetch; calls: Array<string | null> } {
    const calls: Array<string | null> = [];
    return {
      calls,
      fetch: async (input, init) => {
        calls.push(new Headers(init?.headers).get("authorization"));
        if (calls.length <= failures) {
          return new Response(JSON.stringify({ code: "unavailable", message: "the database does not answer" }), {
            status: 503,
            headers: { "content-type": "application/json", "retry-after": "0" },
          });
        }
        return fetch(input, init);
      },
    };
  }

  test("a 503 unavailable is retried with backoff, and the call succeeds when the service answers again", async (t) => {
    const s = await startLiveService(t);
    const flaky = flakyFetch(2);
    const client = clientOf(s, { fetch: flaky.fetch });
    const { job, created } = await client.enqueue({ ...welcomeEmail(), caller: CALLER });
    assert.equal(created, true);
    assert.equal(flaky.calls.length, 3);
    assert.ok(flaky.calls.every((authorization) => authorization?.startsWith("Bearer ")));
    assert.equal((await s.service.store.jobList({ limit: 10 })).length, 1);

    const admin = flakyFetch(2);
    assert.equal((await clientOf(s, { fetch: admin.fetch }).get(job.id)).id, job.id);
    assert.equal(admin.calls.length, 3);
  });

  test("with retries: 1 a persistent 503 throws UnavailableError after two attempts", async (t) => {
    const s = await startLiveService(t);
    const flaky = flakyFetch(Number.POSITIVE_INFINITY);
    const client = clientOf(s, { fetch: flaky.fetch, retries: 1 });
    const error = await assertRefused(
      client.enqueue({ ...welcomeEmail(), caller: CALLER }),
      UnavailableError,
      503,
      "unavailable",
    );
    assert.equal(error.retryAfterSeconds, 0);
    assert.equal(flaky.calls.length, 2);
    assert.equal((await s.service.store.jobList({ limit: 10 })).length, 0);
  });

  test("other refusals are not retried", async (t) => {
    const s = await startLiveService(t);
    const flaky = flakyFetch(0);
    const client = clientOf(s, { fetch: flaky.fetch });
    await assertRefused(
      client.enqueue({ operationId: "getUser", request: { path_params: { userId: "42" } }, caller: CALLER }),
      OperationNotBackgroundError,
      422,
      "operation_not_background",
    );
    assert.equal(flaky.calls.length, 1);
  });
});

describe("admin calls", () => {
  /** Enqueues `count` jobs in chain `rid`; returns them in creation order. */
  async function enqueueMany(client: JobsClient, count: number, rid = "signup-1"): Promise<Job[]> {
    const jobs: Job[] = [];
    for (let i = 0; i < count; i++) {
      jobs.push((await client.enqueue({ ...welcomeEmail(String(i)), caller: { ...CALLER, requestId: rid } })).job);
    }
    return jobs;
  }

  test("get returns the job as enqueue returned it", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER });
    assert.deepEqual(await client.get(job.id), job);
  });

  test("listPage and pages walk the jobs newest first, two per page, to a last page without a cursor", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const created = await enqueueMany(client, 5);
    const newestFirst = created.map((job) => job.id).reverse();

    const first = await client.listPage({ limit: 2 });
    assert.deepEqual(
      first.jobs.map((job) => job.id),
      newestFirst.slice(0, 2),
    );
    assert.equal(typeof first.nextCursor, "string");
    const second = await client.listPage({ limit: 2, cursor: first.nextCursor ?? "" });
    assert.deepEqual(
      second.jobs.map((job) => job.id),
      newestFirst.slice(2, 4),
    );

    const pages = [];
    for await (const page of client.pages({ limit: 2 })) pages.push(page);
    assert.deepEqual(
      pages.map((page) => page.jobs.map((job) => job.id)),
      [newestFirst.slice(0, 2), newestFirst.slice(2, 4), newestFirst.slice(4)],
    );
    assert.equal(pages.at(-1)?.nextCursor, null);
    assert.ok(pages.slice(0, -1).every((page) => typeof page.nextCursor === "string"));
  });

  test("list yields every job once, newest first, across pages, and applies its filters", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const chainA = await enqueueMany(client, 3, "chain-a");
    const chainB = await enqueueMany(client, 4, "chain-b");
    const report = (
      await client.enqueue({
        operationId: "buildReport",
        request: { body: {} },
        caller: { ...CALLER, requestId: "chain-a" },
      })
    ).job;
    await client.cancel(chainB[1]?.id ?? "");

    const all: string[] = [];
    for await (const job of client.list({ limit: 2 })) all.push(job.id);
    assert.deepEqual(all, [...chainA, ...chainB, report].map((job) => job.id).reverse());

    const inChainA: string[] = [];
    for await (const job of client.list({ limit: 2, originalRequestId: "chain-a", operationId: "sendWelcomeEmail" }))
      inChainA.push(job.id);
    assert.deepEqual(inChainA, chainA.map((job) => job.id).reverse());

    const cancelledOfU1: string[] = [];
    for await (const job of client.list({ limit: 2, status: ["cancelled"], userId: "u1" })) cancelledOfU1.push(job.id);
    assert.deepEqual(cancelledOfU1, [chainB[1]?.id]);
  });

  test("cancel cancels a pending job, and retry makes it pending again", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER });
    const cancelled = await client.cancel(job.id);
    assert.equal(cancelled.status, "cancelled");
    assert.equal(cancelled.result?.terminal_reason, "cancelled-by-admin");
    assert.notEqual(cancelled.finished_at, null);
    const retried = await client.retry(job.id);
    assert.equal(retried.id, job.id);
    assert.equal(retried.status, "pending");
    assert.equal(retried.attempt, 0);
    assert.equal(retried.result, null);
    assert.equal(retried.finished_at, null);
    assert.deepEqual(await client.get(job.id), retried);
  });

  test("cancelChain cancels the chain's pending jobs, returns them, and later jobs of the chain are created cancelled", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    // A request id that needs encoding in a path.
    const rid = "signup/42%2F?#x";
    const inChain = await enqueueMany(client, 2, rid);
    const [elsewhere] = await enqueueMany(client, 1, "req-other");

    const cancelled = await client.cancelChain(rid);
    assert.deepEqual(cancelled.map((job) => job.id).sort(), inChain.map((job) => job.id).sort());
    assert.ok(
      cancelled.every((job) => job.status === "cancelled" && job.result?.terminal_reason === "cancelled-by-chain"),
    );
    assert.equal((await client.get(elsewhere?.id ?? "")).status, "pending");

    const later = await client.enqueue({ ...welcomeEmail(), caller: { ...CALLER, requestId: rid } });
    assert.equal(later.created, true);
    assert.equal(later.job.status, "cancelled");
    assert.equal(later.job.result?.terminal_reason, "cancelled-by-chain");
    assert.deepEqual(await client.cancelChain(rid), []);
  });
});

describe("chains: callbacks, waiting, the chain as a unit", () => {
  test("wait answers a stored JSON result as the JSON value (result.body), not a string to parse again", async (t) => {
    const targetUrl = await startHttpTarget(t, (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" }).end('{"sent":true,"id":"m-1"}');
    });
    const s = await startDeliveringService(
      t,
      targetUrl,
      (raw) => (raw["operations"] = { sendWelcomeEmail: { store_result: true } }),
    );
    const client = clientOf(s);
    const caller = { userId: "u1", operationId: "createUser", requestId: "signup-stored-1" };
    const { job } = await client.enqueue({ ...welcomeEmail(), caller });
    const done = await client.wait(job.id, { waitMs: 10_000, caller });
    assert.equal(done.status, "succeeded");
    assert.deepEqual(done.result?.body, { sent: true, id: "m-1" });
    assert.equal(done.result?.body_format, "json");
  });

  test("onComplete enqueues its callback; wait answers the finished job to a producer; getChain answers the tree", async (t) => {
    const paths: string[] = [];
    const targetUrl = await startHttpTarget(t, (req, res) => {
      paths.push(req.url ?? "");
      res.writeHead(204).end();
    });
    const s = await startDeliveringService(t, targetUrl, (raw) => {
      raw["chains"] = { check_ms: 20 };
      raw["triggers"] = {
        createUser: ["sendWelcomeEmail"],
        sendWelcomeEmail: ["recordEmailSent"],
        "cron:nightly": ["buildReport"],
      };
    });
    const client = clientOf(s);
    const caller = { userId: "u1", operationId: "createUser", requestId: "signup-chain-1" };
    const { job } = await client.enqueue({
      ...welcomeEmail(),
      caller,
      onComplete: { operationId: "recordEmailSent", pathParams: { emailId: "welcome-42" } },
    });
    const done = await client.wait(job.id, { waitMs: 10_000, caller });
    assert.equal(done.status, "succeeded");
    const chain = await (async () => {
      for (;;) {
        const read = await client.getChain("signup-chain-1");
        if (read.settled && read.counts.succeeded === 2) return read;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    assert.equal(chain.jobs[0]?.job.id, job.id);
    assert.equal(chain.jobs[0]?.children[0]?.job.operation_id, "recordEmailSent");
    assert.ok(paths.includes("/emails/welcome-42/record"));
  });
});

describe("admin calls: run now, attempts and history", () => {
  test("runNow makes a delayed job due now; history names every administrator's action with the token's sub; attempts lists none yet", async (t) => {
    const s = await startLiveService(t);
    const client = createJobsClient({
      baseUrl: s.url,
      sign: SIGN,
      adminToken: () => s.adminToken({ sub: "alice@example.com" }),
    });
    const { job } = await client.enqueue({ ...welcomeEmail(), delayMs: 3_600_000, caller: CALLER });
    const moved = await client.runNow(job.id);
    assert.equal(moved.status, "pending");
    assert.ok(Date.parse(moved.run_at) < Date.parse(job.run_at));
    await client.cancel(job.id);
    await assert.rejects(client.runNow(job.id), (error: unknown) => {
      assert.ok(error instanceof JobNotWaitingError);
      assert.equal((error as OpqueueError).status, 409);
      return true;
    });
    await client.retry(job.id);
    const history = await client.history(job.id);
    assert.deepEqual(
      history.map((event) => (event.type === "admin" ? `${event.action} by ${event.actor}` : event.type)),
      ["enqueued", "run-now by alice@example.com", "cancel by alice@example.com", "retry by alice@example.com"],
    );
    assert.deepEqual(history[0], { type: "enqueued", at: job.created_at, by: "createUser" });
    assert.deepEqual(await client.attempts(job.id), []);
  });
});

describe("admin calls: flow control", () => {
  /** A client acting as alice@example.com, whose name the service stamps on what she pauses and sets. */
  function aliceOf(s: LiveService): JobsClient {
    return clientOf(s, { adminToken: () => s.adminToken({ sub: "alice@example.com" }) });
  }

  /** Whether a claim (as a dispatcher makes it, the worker not running) takes job `id` now. */
  async function claims(s: LiveService, id: string): Promise<boolean> {
    const claimed = await s.service.store.jobClaimMany({ limit: 10 });
    return claimed.some((job) => job.id === id);
  }

  test("listOperations lists every background operation with its control; pause and resume stamp who paused, and claims obey", async (t) => {
    const s = await startLiveService(t);
    const client = aliceOf(s);
    const operations = await client.listOperations();
    assert.deepEqual(
      operations.map((operation) => operation.operation_id),
      ["buildReport", "recordEmailSent", "sendWelcomeEmail"],
    );
    const welcome = operations.find((operation) => operation.operation_id === "sendWelcomeEmail");
    assert.equal(welcome?.method, "POST");
    assert.equal(welcome?.path, "/users/{userId}/welcome-email");
    assert.equal(welcome?.max_attempts, 8);
    assert.deepEqual(welcome?.control, {
      paused: null,
      limits: { rate: null, rate_per_key: null, max_concurrency: null, concurrency_limit: 1 },
      limits_source: "config",
      limits_set: null,
    });

    const before = Date.now();
    const paused = await client.pauseOperation("sendWelcomeEmail");
    assert.equal(paused.operation_id, "sendWelcomeEmail");
    assert.equal(paused.paused?.by, "alice@example.com");
    assert.ok(Date.parse(paused.paused?.at ?? "") >= before - 1000, paused.paused?.at);
    const listed = (await client.listOperations()).find((operation) => operation.operation_id === "sendWelcomeEmail");
    assert.deepEqual(listed?.control.paused, paused.paused);

    const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER });
    assert.equal(job.status, "pending", "a paused operation still takes enqueues");
    assert.equal(await claims(s, job.id), false, "no claim takes a job of a paused operation");

    const resumed = await client.resumeOperation("sendWelcomeEmail");
    assert.equal(resumed.paused, null);
    assert.equal(await claims(s, job.id), true, "resumed, its job is claimed");
  });

  test("pause, resume and the limits calls throw OperationNotFoundError for an operation that is not a background one", async (t) => {
    const s = await startLiveService(t);
    const client = aliceOf(s);
    for (const call of [
      () => client.pauseOperation("getUser"),
      () => client.resumeOperation("noSuchOperation"),
      () => client.setOperationLimits("getUser", { max_concurrency: 2 }),
      () => client.resetOperationLimits("noSuchOperation"),
    ]) {
      await assertRefused(call(), OperationNotFoundError, 404, "operation_not_found");
    }
  });

  test("setOperationLimits changes the given limits and keeps the others; resetOperationLimits puts the configuration's back", async (t) => {
    const s = await startLiveService(t, {
      configure: (raw) => {
        raw["operations"] = { buildReport: { rate: { limit: 10, period_ms: 1000 }, max_concurrency: 3 } };
      },
    });
    const client = aliceOf(s);
    const configured = {
      rate: { limit: 10, period_ms: 1000, burst: 10 },
      rate_per_key: null,
      max_concurrency: 3,
      concurrency_limit: 1,
    };
    const listed = (await client.listOperations()).find((operation) => operation.operation_id === "buildReport");
    assert.deepEqual(listed?.control.limits, configured);
    assert.equal(listed?.control.limits_source, "config");

    const set = await client.setOperationLimits("buildReport", {
      max_concurrency: 5,
      rate_per_key: { limit: 2, period_ms: 60_000 },
    });
    assert.deepEqual(set.limits, {
      ...configured,
      max_concurrency: 5,
      rate_per_key: { limit: 2, period_ms: 60_000, burst: 2 },
    });
    assert.equal(set.limits_source, "admin");
    assert.equal(set.limits_set?.by, "alice@example.com");
    const removed = await client.setOperationLimits("buildReport", { rate: null, concurrency_limit: 4 });
    assert.deepEqual(removed.limits, { ...set.limits, rate: null, concurrency_limit: 4 });
    const again = (await client.listOperations()).find((operation) => operation.operation_id === "buildReport");
    assert.deepEqual(again?.control.limits, removed.limits);
    assert.equal(again?.control.limits_source, "admin");

    // The limits it reads back round-trip.
    assert.deepEqual((await client.setOperationLimits("buildReport", removed.limits)).limits, removed.limits);
    await assertRefused(client.setOperationLimits("buildReport", {}), InvalidRequestError, 400, "invalid_request");
    await assertRefused(
      client.setOperationLimits("buildReport", { max_concurrency: 0 }),
      InvalidRequestError,
      400,
      "invalid_request",
    );

    const reset = await client.resetOperationLimits("buildReport");
    assert.deepEqual(reset.limits, configured);
    assert.equal(reset.limits_source, "config");
  });

  test("pauseConcurrencyKey, listPausedKeys and resumeConcurrencyKey; a key needing encoding reaches its route, and claims obey", async (t) => {
    const s = await startLiveService(t);
    const client = aliceOf(s);
    const key = "tenant/42?#%2F";
    assert.deepEqual(await client.listPausedKeys(), []);
    const paused = await client.pauseConcurrencyKey(key);
    assert.equal(paused.concurrency_key, key);
    assert.equal(paused.paused.by, "alice@example.com");
    assert.deepEqual(await client.listPausedKeys(), [paused]);

    const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER, concurrencyKey: key });
    const { job: other } = await client.enqueue({ ...welcomeEmail("7"), caller: CALLER, concurrencyKey: "tenant/43" });
    const claimed = await s.service.store.jobClaimMany({ limit: 10 });
    assert.deepEqual(
      claimed.map((row) => row.id),
      [other.id],
      "only the job whose key is not paused is claimed",
    );

    assert.equal(await client.resumeConcurrencyKey(key), true);
    assert.equal(await client.resumeConcurrencyKey(key), false, "a key that is not paused");
    assert.deepEqual(await client.listPausedKeys(), []);
    assert.equal(await claims(s, job.id), true);
  });

  test("cancelJobs cancels the waiting jobs matching each filter, newest first, up to its limit, and names the action in their history", async (t) => {
    const s = await startLiveService(t);
    const client = aliceOf(s);
    const enqueue = async (options: {
      userId?: string;
      requestId?: string;
      operationId?: string;
      dedupeKey?: string;
    }) =>
      (
        await client.enqueue({
          ...(options.operationId === "buildReport"
            ? { operationId: "buildReport", request: { body: {} } }
            : welcomeEmail()),
          caller: { ...CALLER, userId: options.userId ?? "u1", requestId: options.requestId ?? "signup-1" },
          ...(options.dedupeKey === undefined ? {} : { dedupeKey: options.dedupeKey }),
        })
      ).job;
    const reports = [await enqueue({ operationId: "buildReport" }), await enqueue({ operationId: "buildReport" })];
    const ofU2 = await enqueue({ userId: "u2" });
    const ofChain = await enqueue({ requestId: "chain-x" });
    const deduped = await enqueue({ dedupeKey: "welcome:once" });
    const boundary = new Date(Date.now() + 1);
    while (Date.now() <= boundary.getTime()) await new Promise((resolve) => setImmediate(resolve));
    const late = [await enqueue({}), await enqueue({}), await enqueue({})];

    const byOperation = await client.cancelJobs({ operationId: "buildReport" });
    assert.deepEqual(
      byOperation.map((job) => job.id),
      reports.map((job) => job.id).reverse(),
      "newest first",
    );
    assert.ok(
      byOperation.every((job) => job.status === "cancelled" && job.result?.terminal_reason === "cancelled-by-admin"),
    );
    assert.deepEqual(
      (await client.cancelJobs({ userId: "u2" })).map((job) => job.id),
      [ofU2.id],
    );
    assert.deepEqual(
      (await client.cancelJobs({ originalRequestId: "chain-x" })).map((job) => job.id),
      [ofChain.id],
    );
    assert.deepEqual(
      (await client.cancelJobs({ dedupeKey: "welcome:once" })).map((job) => job.id),
      [deduped.id],
    );
    assert.deepEqual(
      (await client.cancelJobs({ createdAfter: boundary, limit: 2 })).map((job) => job.id),
      [late[2]?.id, late[1]?.id],
    );
    assert.deepEqual(
      (await client.cancelJobs({ createdAfter: boundary.toISOString() })).map((job) => job.id),
      [late[0]?.id],
    );
    assert.deepEqual(
      await client.cancelJobs({ createdBefore: boundary }),
      [],
      "every earlier job is cancelled already",
    );

    const history = await client.history(ofU2.id);
    assert.deepEqual(history.at(-1), {
      type: "admin",
      at: history.at(-1)?.at,
      actor: "alice@example.com",
      role: "admin",
      action: "cancel-many",
    });
    await assertRefused(client.cancelJobs({}), InvalidRequestError, 400, "invalid_request");
    await assertRefused(client.cancelJobs({ statuses: ["pending"] }), InvalidRequestError, 400, "invalid_request");
    await assertRefused(
      client.cancelJobs({ operationId: "buildReport", limit: 1001 }),
      InvalidRequestError,
      400,
      "invalid_request",
    );
  });

  test("cancelJobs cancels running jobs only when statuses name running", async (t) => {
    const s = await startLiveService(t);
    const client = aliceOf(s);
    const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER });
    assert.equal(await claims(s, job.id), true);
    assert.deepEqual(
      await client.cancelJobs({ operationId: "sendWelcomeEmail" }),
      [],
      "pending and retrying by default",
    );
    const cancelled = await client.cancelJobs({ operationId: "sendWelcomeEmail", statuses: ["running"] });
    assert.deepEqual(
      cancelled.map((row) => [row.id, row.status]),
      [[job.id, "cancelled"]],
    );
  });

  test("cancel of a running job throws JobRunningError, and with { abort: true } cancels it", async (t) => {
    const s = await startLiveService(t);
    const client = aliceOf(s);
    const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER });
    assert.equal(await claims(s, job.id), true);
    await assertRefused(client.cancel(job.id), JobRunningError, 409, "job_running");
    const cancelled = await client.cancel(job.id, { abort: true });
    assert.equal(cancelled.status, "cancelled");
    assert.equal(cancelled.result?.terminal_reason, "cancelled-by-admin");
    // abort changes nothing for a waiting job.
    const { job: waiting } = await client.enqueue({ ...welcomeEmail("2"), caller: CALLER });
    assert.equal((await client.cancel(waiting.id, { abort: true })).status, "cancelled");
  });

  test("enqueue sends rateKey as rate_key, which the job is stored with (it is not part of the job's wire form)", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER, rateKey: "tenant-7" });
    assert.equal((await s.service.store.jobGet({ id: job.id }))?.rateKey, "tenant-7");
    assert.equal("rate_key" in job, false);
    const { job: without } = await client.enqueue({ ...welcomeEmail("2"), caller: CALLER });
    assert.equal((await s.service.store.jobGet({ id: without.id }))?.rateKey, null);
  });

  test("flow control calls with a bad token throw UnauthenticatedError, and without site_admin SiteAdminRequiredError", async (t) => {
    const s = await startLiveService(t);
    const strangers = createJobsClient({ baseUrl: s.url, adminToken: "not-a-token" });
    const users = createJobsClient({ baseUrl: s.url, adminToken: () => s.adminToken({ siteAdmin: false }) });
    for (const [client, ErrorClass, status, code] of [
      [strangers, UnauthenticatedError, 401, "unauthenticated"],
      [users, SiteAdminRequiredError, 403, "site_admin_required"],
    ] as const) {
      for (const call of [
        () => client.listOperations(),
        () => client.pauseOperation("sendWelcomeEmail"),
        () => client.resumeOperation("sendWelcomeEmail"),
        () => client.setOperationLimits("sendWelcomeEmail", { max_concurrency: 1 }),
        () => client.resetOperationLimits("sendWelcomeEmail"),
        () => client.listPausedKeys(),
        () => client.pauseConcurrencyKey("k"),
        () => client.resumeConcurrencyKey("k"),
        () => client.cancelJobs({ operationId: "sendWelcomeEmail" }),
      ]) {
        await assertRefused(call(), ErrorClass, status, code);
      }
    }
    assert.equal(
      (await clientOf(s).listOperations()).every((operation) => operation.control.paused === null),
      true,
    );
  });
});

describe("request ids and path segments (docs/tokens.md, Revision 2)", () => {
  test("a request id spelled like Fastify's default req.id (req-1, req-2z...) is warned of once per client; other ids are not", async (t) => {
    const s = await startLiveService(t);
    const warnings: string[] = [];
    const onWarning = (warning: Error) => {
      if ((warning as Error & { code?: string }).code === PER_PROCESS_REQUEST_ID_WARNING)
        warnings.push(warning.message);
    };
    process.on("warning", onWarning);
    t.after(() => void process.off("warning", onWarning));
    // process.emitWarning reaches listeners on the next tick.
    const settle = () => new Promise((resolve) => setImmediate(resolve));

    const careful = clientOf(s);
    for (const requestId of [
      "0b5c7a3e-8f61-4b8e-9d0a-2f6c1e7b4a90",
      "signup-42",
      "req-",
      "req-ABC",
      "request-1",
      "req-1/2",
    ]) {
      await careful.enqueue({ ...welcomeEmail(), caller: { ...CALLER, requestId } });
    }
    await settle();
    assert.deepEqual(warnings, [], "no false alarm");

    const careless = clientOf(s);
    await careless.enqueue({ ...welcomeEmail(), caller: { ...CALLER, requestId: "req-1" } });
    await careless.enqueue({ ...welcomeEmail(), caller: { ...CALLER, requestId: "req-2z" } });
    await settle();
    assert.equal(warnings.length, 1, "once per client");
    assert.match(warnings[0] ?? "", /"req-1" looks like Fastify's default request id.*globally unique/);
  });

  test("enqueue throws before sending when caller.requestId is empty, over 255 characters, not visible ASCII, or . or ..", async (t) => {
    const s = await startLiveService(t);
    const sent: string[] = [];
    const client = clientOf(s, {
      fetch: (input, init) => {
        sent.push(String(input));
        return fetch(input, init);
      },
    });
    for (const requestId of [
      "",
      "r".repeat(256),
      "req 1",
      "req-1\r\nx-admin: 1",
      "req\t1",
      "req-1\x7f",
      "réq-1",
      "req-\u{1F600}",
      ".",
      "..",
    ]) {
      await assert.rejects(
        client.enqueue({ ...welcomeEmail(), caller: { ...CALLER, requestId } }),
        (error: unknown) => {
          assert.ok(!(error instanceof OpqueueError), `thrown by the client, not the service: ${String(error)}`);
          assert.match(
            (error as Error).message,
            /caller\.requestId must be 1\.\.255 characters of visible ASCII/,
            JSON.stringify(requestId),
          );
          return true;
        },
      );
    }
    assert.deepEqual(sent, []);
    const longest = "!~".repeat(128).slice(0, 255);
    const { job } = await client.enqueue({ ...welcomeEmail(), caller: { ...CALLER, requestId: longest } });
    assert.equal(job.original_request_id, longest);
    assert.equal(sent.length, 1);
  });

  test("get, cancel, retry and cancelChain percent-encode the id, so /, ?, # and % stay inside its path segment", async (t) => {
    const s = await startLiveService(t);
    const urls: string[] = [];
    const client = clientOf(s, {
      fetch: (input, init) => {
        urls.push(String(input));
        return fetch(input, init);
      },
    });
    const odd = "a/b?c#d%2Fe";
    const encoded = "a%2Fb%3Fc%23d%252Fe";
    // No job has that id: the service answers job_not_found from the right route, not not_found from another.
    await assertRefused(client.get(odd), JobNotFoundError, 404, "job_not_found");
    await assertRefused(client.cancel(odd), JobNotFoundError, 404, "job_not_found");
    await assertRefused(client.retry(odd), JobNotFoundError, 404, "job_not_found");
    assert.deepEqual(await client.cancelChain(odd), []);
    assert.deepEqual(urls, [
      `${s.url}/jobs/${encoded}`,
      `${s.url}/jobs/${encoded}/cancel`,
      `${s.url}/jobs/${encoded}/retry`,
      `${s.url}/chains/${encoded}/cancel`,
    ]);
  });

  test("cancelChain reaches the chain named by ids such as a/b, %2F, ?x and #y, and no other", async (t) => {
    const s = await startLiveService(t);
    const client = clientOf(s);
    const rids = ["a/b", "a", "%2F", "/", "?x", "#y", "a%2Fb"];
    const jobs = new Map<string, Job>();
    for (const rid of rids)
      jobs.set(rid, (await client.enqueue({ ...welcomeEmail(), caller: { ...CALLER, requestId: rid } })).job);
    for (const rid of ["a/b", "%2F", "?x", "#y"]) {
      const cancelled = await client.cancelChain(rid);
      assert.deepEqual(
        cancelled.map((job) => job.id),
        [jobs.get(rid)?.id],
        rid,
      );
    }
    for (const rid of ["a", "/", "a%2Fb"])
      assert.equal((await client.get(jobs.get(rid)?.id ?? "")).status, "pending", rid);
  });

  test("an empty id, . or .. throws before sending: URL parsing would turn it into another route", async (t) => {
    const s = await startLiveService(t);
    let calls = 0;
    const client = clientOf(s, {
      fetch: (input, init) => {
        calls++;
        return fetch(input, init);
      },
    });
    for (const id of ["", ".", ".."]) {
      for (const call of [
        client.get(id),
        client.cancel(id),
        client.retry(id),
        client.cancelChain(id),
        client.pauseOperation(id),
        client.resumeOperation(id),
        client.setOperationLimits(id, { max_concurrency: 1 }),
        client.resetOperationLimits(id),
        client.pauseConcurrencyKey(id),
        client.resumeConcurrencyKey(id),
      ]) {
        await assert.rejects(
          call,
          (error: unknown) =>
            !(error instanceof OpqueueError) && /must be a non-empty string other than/.test((error as Error).message),
        );
      }
    }
    assert.equal(calls, 0);
  });
});

describe("target side: the Fastify plugin", () => {
  test("a delivered job reaches the handler with request.delivery and currentDelivery() (also in awaited functions) matching the job", async (t) => {
    const seen = deferred<{
      plugin: DeliveryContext | undefined;
      inHandler: DeliveryContext | undefined;
      awaited: DeliveryContext | undefined;
      body: unknown;
    }>();
    const later = async (): Promise<DeliveryContext | undefined> => {
      await new Promise((resolve) => setImmediate(resolve));
      return currentDelivery();
    };
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (request, reply) => {
        const inHandler = currentDelivery();
        const awaited = await later();
        seen.resolve({ plugin: request.delivery, inHandler, awaited, body: request.body });
        return reply.code(204).send();
      });
    });
    const s = await startDeliveringService(t, targetUrl);
    const { job } = await clientOf(s).enqueue({
      operationId: "sendWelcomeEmail",
      request: { path_params: { userId: "42" }, body: { email: "u42@example.com" } },
      caller: CALLER,
    });

    const { plugin, inHandler, awaited, body } = await seen.promise;
    const expected = deliveryOf(job);
    assertDelivery(plugin, expected);
    assert.equal(inHandler, plugin, "currentDelivery() is request.delivery");
    assert.equal(awaited, plugin);
    assert.deepEqual(body, { email: "u42@example.com" });
    assert.equal(currentDelivery(), undefined, "the delivery does not leak out of the request");
    assert.equal((await s.deliveryFinished(job.id)).outcome, "succeeded");
    await s.waitForJob(job.id, (row) => row.status === "succeeded", "succeeded");
  });

  test("currentDelivery() holds in the handler when the request body arrives after the headers", async (t) => {
    const s = await startLiveService(t);
    const headersHandled = deferred();
    const seen = deferred<{ plugin: DeliveryContext | undefined; current: DeliveryContext | undefined }>();
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      // Runs after the plugin's hook: the token is verified, the body not yet read.
      background.addHook("onRequest", async () => headersHandled.resolve());
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (request, reply) => {
        seen.resolve({ plugin: request.delivery, current: currentDelivery() });
        return reply.code(204).send();
      });
    });
    const { job } = await clientOf(s).enqueue({ ...welcomeEmail(), caller: CALLER });
    const token = await s.service.signer.sign({
      sub: job.user_id,
      op: job.operation_id,
      job: job.id,
      att: 1,
      clm: 1,
      rid: job.original_request_id,
      authority: job.authority,
      timeoutMs: 30_000,
    });
    const body = JSON.stringify({ email: "u42@example.com" });
    const { port } = new URL(targetUrl);
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const req = httpRequest(
        {
          host: "127.0.0.1",
          port,
          method: "POST",
          path: "/users/42/welcome-email",
          headers: {
            ...deliveryHeaders(deliveryOf(job), token),
            "content-type": "application/json",
            "content-length": Buffer.byteLength(body),
          },
        },
        (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode));
        },
      );
      req.on("error", reject);
      req.flushHeaders();
      void headersHandled.promise.then(() => req.end(body));
    });
    assert.equal(status, 204);
    const { plugin, current } = await seen.promise;
    assertDelivery(plugin, deliveryOf(job));
    assert.equal(current, plugin);
  });

  test("enqueue without caller inside the handler chains to the delivered job, copying its user, chain and authority", async (t) => {
    // The service's URL, and so the client, is known only once the service is up, after the target.
    const clientReady = deferred<JobsClient>();
    const chained = deferred<Job>();
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post<{ Params: { userId: string } }>(
        "/users/:userId/welcome-email",
        implementing("sendWelcomeEmail"),
        async (request, reply) => {
          const client = await clientReady.promise;
          const { job } = await client.enqueue({
            operationId: "recordEmailSent",
            request: { path_params: { emailId: `email-${request.params.userId}` } },
          });
          chained.resolve(job);
          return reply.code(204).send();
        },
      );
      background.put(
        "/emails/:emailId/record",
        { config: { operationId: "recordEmailSent" } },
        async (_request, reply) => reply.code(204).send(),
      );
    });
    const s = await startDeliveringService(t, targetUrl);
    const client = clientOf(s);
    clientReady.resolve(client);
    // A root job under a resource authority on behalf of u9, so that copying the authority shows.
    const authority: Authority = { kind: "resource", resource_id: "import-7", resource_kind: "import", user_id: "u9" };
    const { job: parent } = await client.enqueue({
      ...welcomeEmail("u9"),
      caller: { userId: "admin-1", operationId: "importUsers", requestId: "import-7" },
      onBehalfOf: { userId: "u9", authority },
    });

    const child = await chained.promise;
    assert.equal(child.parent_job_id, parent.id);
    assert.equal(child.original_request_id, "import-7");
    assert.equal(child.user_id, "u9");
    assert.equal(child.enqueued_by_operation_id, "sendWelcomeEmail");
    assert.deepEqual(child.authority, authority);
    assert.equal((await s.deliveryFinished(parent.id)).outcome, "succeeded");
    assert.equal((await s.deliveryFinished(child.id)).outcome, "succeeded");
  });

  test("a request without a token or with a bad one is answered 401 invalid_delivery_token and the handler does not run", async (t) => {
    let handled = 0;
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (_request, reply) => {
        handled++;
        return reply.code(204).send();
      });
    });
    for (const { what, headers } of await badAuthorizations()) {
      const res = await fetch(`${targetUrl}/users/42/welcome-email`, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json" },
        body: "{}",
      });
      assert.equal(res.status, 401, what);
      const body = (await res.json()) as { code: string; message: string };
      assert.equal(body.code, "invalid_delivery_token", what);
      assert.ok(body.message.length > 0, what);
    }
    assert.equal(handled, 0);
  });

  test("a target verifying with another secret refuses the service's delivery, which ends the job dead", async (t) => {
    let handled = 0;
    const targetUrl = await startFastifyTarget(
      t,
      { secret: "not-the-delivery-secret-but-32-bytes-long", audience: "product" },
      (background) => {
        background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (_request, reply) => {
          handled++;
          return reply.code(204).send();
        });
      },
    );
    const s = await startDeliveringService(t, targetUrl);
    const { job } = await clientOf(s).enqueue({ ...welcomeEmail(), caller: CALLER });
    const finished = await s.deliveryFinished(job.id);
    assert.equal(finished.statusCode, 401);
    assert.equal(finished.outcome, "dead");
    assert.equal(finished.terminalReason, "permanent-status");
    assert.equal(handled, 0);
  });
});

describe("target side: the Express-style middleware", () => {
  test("on a plain node:http server, a delivered job sets req.delivery and currentDelivery() inside next", async (t) => {
    const middleware = opqueueDeliveryMiddleware({ ...DELIVERY_OPTIONS, operationId: "sendWelcomeEmail" });
    const seen = deferred<{
      req: DeliveryContext | undefined;
      inNext: DeliveryContext | undefined;
      afterBody: DeliveryContext | undefined;
      body: string;
    }>();
    const targetUrl = await startHttpTarget(t, (req: IncomingMessage & { delivery?: DeliveryContext }, res) => {
      middleware(req, res, (error) => {
        if (error) throw error;
        const inNext = currentDelivery();
        void readBody(req).then(
          (body) => {
            seen.resolve({ req: req.delivery, inNext, afterBody: currentDelivery(), body });
            res.statusCode = 204;
            res.end();
          },
          () => res.destroy(),
        );
      });
    });
    const s = await startDeliveringService(t, targetUrl);
    const { job } = await clientOf(s).enqueue({
      operationId: "sendWelcomeEmail",
      request: { path_params: { userId: "42" }, body: { email: "u42@example.com" } },
      caller: CALLER,
    });
    const { req, inNext, afterBody, body } = await seen.promise;
    assertDelivery(req, deliveryOf(job));
    assert.equal(inNext, req, "currentDelivery() is req.delivery");
    assert.equal(afterBody, req);
    assert.deepEqual(JSON.parse(body), { email: "u42@example.com" });
    assert.equal((await s.deliveryFinished(job.id)).outcome, "succeeded");
  });

  test("a request without a token or with a bad one is answered 401 invalid_delivery_token and next is not called", async (t) => {
    const middleware = opqueueDeliveryMiddleware({ ...DELIVERY_OPTIONS, operationId: "sendWelcomeEmail" });
    let nextCalls = 0;
    const targetUrl = await startHttpTarget(t, (req, res) => {
      middleware(req, res, () => {
        nextCalls++;
        res.statusCode = 204;
        res.end();
      });
    });
    for (const { what, headers } of await badAuthorizations()) {
      const res = await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers });
      assert.equal(res.status, 401, what);
      assert.equal(res.headers.get("content-type"), "application/json", what);
      assert.equal(((await res.json()) as { code: string }).code, "invalid_delivery_token", what);
    }
    assert.equal(nextCalls, 0);
    const valid = await fetch(`${targetUrl}/x`, {
      method: "POST",
      headers: deliveryHeaders(SAMPLE_DELIVERY, await deliveryToken(SAMPLE_DELIVERY)),
    });
    assert.equal(valid.status, 204);
    assert.equal(nextCalls, 1);
  });
});

describe("target side: the delivery's abort signal", () => {
  /** What a handler saw of its delivery's signal: it started, and the signal aborted (with its reason). */
  interface SignalWatch {
    started: ReturnType<typeof deferred<AbortSignal>>;
    aborted: ReturnType<typeof deferred<unknown>>;
  }
  const watch = (): SignalWatch => ({ started: deferred<AbortSignal>(), aborted: deferred<unknown>() });

  /** Waits for `signal` to abort (or be aborted already); resolves `watched.aborted` with its reason. */
  function awaitAbort(signal: AbortSignal | undefined, watched: SignalWatch): Promise<void> {
    assert.ok(signal instanceof AbortSignal, "the delivery carries a signal");
    watched.started.resolve(signal);
    return new Promise<void>((resolve) => {
      const done = () => {
        watched.aborted.resolve(signal.reason);
        resolve();
      };
      if (signal.aborted) done();
      else signal.addEventListener("abort", done, { once: true });
    });
  }

  /** Sends SAMPLE_DELIVERY to `url` and closes the connection once the handler has started; the handler's signal. */
  async function sendAndHangUp(url: string, watched: SignalWatch): Promise<AbortSignal> {
    const { port } = new URL(url);
    const headers = deliveryHeaders(SAMPLE_DELIVERY, await deliveryToken(SAMPLE_DELIVERY));
    const req = httpRequest({
      host: "127.0.0.1",
      port,
      method: "POST",
      path: "/users/42/welcome-email",
      headers: { ...headers, "content-type": "application/json" },
    });
    // The hang-up is the point: the client side's ECONNRESET is expected.
    req.on("error", () => undefined);
    req.end("{}");
    const signal = await watched.started.promise;
    assert.equal(signal.aborted, false, "not aborted while the caller waits");
    req.destroy();
    return signal;
  }

  /** Asserts that `reason` says the delivery was aborted, as an AbortError. */
  function assertAbortReason(reason: unknown): void {
    assert.ok(reason instanceof DOMException, `a DOMException, got ${String(reason)}`);
    assert.equal(reason.name, "AbortError");
    assert.match(reason.message, /opqueue aborted the delivery/);
  }

  test("the Fastify plugin's request.delivery.signal aborts when the caller hangs up before the reply is sent", async (t) => {
    const watched = watch();
    const inContext = deferred<AbortSignal | undefined>();
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (request, reply) => {
        inContext.resolve(currentDelivery()?.signal);
        await awaitAbort(request.delivery?.signal, watched);
        return reply.code(204).send();
      });
    });
    const signal = await sendAndHangUp(targetUrl, watched);
    assertAbortReason(await watched.aborted.promise);
    assert.equal(signal.aborted, true);
    assert.equal(await inContext.promise, signal, "currentDelivery() carries the same signal");
  });

  test("the Fastify plugin's signal never aborts once the reply has been sent", async (t) => {
    const seen = deferred<{ signal: AbortSignal | undefined; closed: Promise<void> }>();
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (request, reply) => {
        const closed = new Promise<void>((resolve) => reply.raw.once("close", () => resolve()));
        seen.resolve({ signal: request.delivery?.signal, closed });
        return reply.code(204).send();
      });
    });
    const res = await fetch(`${targetUrl}/users/42/welcome-email`, {
      method: "POST",
      headers: {
        ...deliveryHeaders(SAMPLE_DELIVERY, await deliveryToken(SAMPLE_DELIVERY)),
        "content-type": "application/json",
      },
      body: "{}",
    });
    assert.equal(res.status, 204);
    const { signal, closed } = await seen.promise;
    await closed;
    assert.ok(signal instanceof AbortSignal);
    assert.equal(signal.aborted, false);
  });

  test("the Express middleware's req.delivery.signal aborts when the caller hangs up before the response is sent, and not after one is", async (t) => {
    const middleware = opqueueDeliveryMiddleware({ ...DELIVERY_OPTIONS, operationId: "sendWelcomeEmail" });
    const hungUp = watch();
    const answered = deferred<{ signal: AbortSignal | undefined; closed: Promise<void> }>();
    let calls = 0;
    const targetUrl = await startHttpTarget(t, (req: IncomingMessage & { delivery?: DeliveryContext }, res) => {
      middleware(req, res, () => {
        if (++calls === 1) {
          void awaitAbort(req.delivery?.signal, hungUp).then(() => res.end());
          return;
        }
        const closed = new Promise<void>((resolve) => res.once("close", () => resolve()));
        answered.resolve({ signal: currentDelivery()?.signal, closed });
        res.statusCode = 204;
        res.end();
      });
    });
    const signal = await sendAndHangUp(targetUrl, hungUp);
    assertAbortReason(await hungUp.aborted.promise);
    assert.equal(signal.aborted, true);

    const res = await fetch(`${targetUrl}/users/42/welcome-email`, {
      method: "POST",
      headers: deliveryHeaders(SAMPLE_DELIVERY, await deliveryToken(SAMPLE_DELIVERY)),
    });
    assert.equal(res.status, 204);
    const { signal: finished, closed } = await answered.promise;
    await closed;
    assert.ok(finished instanceof AbortSignal);
    assert.equal(finished.aborted, false);
  });

  test("deliveryAbortSignal, for the bare verifier, is aborted at once when made for a response whose connection has closed", async (t) => {
    const made = deferred<AbortSignal>();
    const arrived = deferred();
    const targetUrl = await startHttpTarget(t, (_req, res) => {
      arrived.resolve();
      res.once("close", () => setImmediate(() => made.resolve(deliveryAbortSignal(res))));
    });
    const req = httpRequest(`${targetUrl}/x`, { method: "POST" });
    req.on("error", () => undefined);
    req.end();
    await arrived.promise;
    req.destroy();
    const signal = await made.promise;
    assert.equal(signal.aborted, true);
    assertAbortReason(signal.reason);
  });

  test("an administrator's cancel with { abort: true } aborts the delivery: the handler's signal aborts, and the job ends cancelled", async (t) => {
    const watched = watch();
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (request, reply) => {
        await awaitAbort(request.delivery?.signal, watched);
        return reply.code(204).send();
      });
    });
    const s = await startDeliveringService(t, targetUrl);
    const client = clientOf(s);
    const { job } = await client.enqueue({ ...welcomeEmail(), caller: CALLER });
    await watched.started.promise;
    assert.equal((await client.get(job.id)).status, "running");
    const cancelled = await client.cancel(job.id, { abort: true });
    assert.equal(cancelled.status, "cancelled");
    assertAbortReason(await watched.aborted.promise);
    await s.waitForJob(job.id, (row) => row.status === "cancelled", "cancelled");
    assert.equal((await client.get(job.id)).result?.terminal_reason, "cancelled-by-admin");
  });
});

describe("target side: a delivery is bound to its route and its headers (docs/tokens.md, 'Verifying a delivery')", () => {
  /** A token for SAMPLE_DELIVERY (operation sendWelcomeEmail, attempt 2) and the headers opqueue sends with it. */
  async function sample(delivery: DeliveryContext = SAMPLE_DELIVERY): Promise<Record<string, string>> {
    return deliveryHeaders(delivery, await deliveryToken(delivery));
  }

  /** Header changes a target must refuse, each with what is wrong: every way the headers can disagree with the token. */
  function mismatches(headers: Record<string, string>): Array<{ what: string; headers: Record<string, string> }> {
    const without = (name: string) => Object.fromEntries(Object.entries(headers).filter(([key]) => key !== name));
    return [
      { what: "x-job-id of another job", headers: { ...headers, "x-job-id": "job_other_0001" } },
      { what: "no x-job-id", headers: without("x-job-id") },
      { what: "a fresh idempotency-key (a replay)", headers: { ...headers, "idempotency-key": "fresh-key-0001" } },
      { what: "no idempotency-key", headers: without("idempotency-key") },
      {
        what: "x-job-id and idempotency-key both of another job",
        headers: { ...headers, "x-job-id": "job_other_0001", "idempotency-key": "job_other_0001" },
      },
      { what: "x-job-attempt of another attempt", headers: { ...headers, "x-job-attempt": "3" } },
      { what: "x-job-attempt spelled otherwise", headers: { ...headers, "x-job-attempt": "02" } },
      { what: "no x-job-attempt", headers: without("x-job-attempt") },
    ];
  }

  /** Asserts `promise` rejects with a DeliveryTokenError whose message matches `message`. */
  async function refusedDelivery(promise: Promise<unknown>, message: RegExp, what: string): Promise<void> {
    await assert.rejects(promise, (error: unknown) => {
      assert.ok(error instanceof DeliveryTokenError, `${what}: expected a DeliveryTokenError, got ${String(error)}`);
      assert.match(error.message, message, what);
      return true;
    });
  }

  test("the bare verifier accepts a token whose op, job and att match the route and the headers", async () => {
    const verifier = createDeliveryVerifier(DELIVERY_OPTIONS);
    const headers = await sample();
    const token = (headers["authorization"] ?? "").slice("Bearer ".length);
    assert.deepEqual(
      withoutToken(await verifier.verifyDelivery(headers, { operationId: "sendWelcomeEmail" }), token),
      SAMPLE_DELIVERY,
    );
    assert.deepEqual(
      withoutToken(
        await verifyDelivery(new Headers(headers), { ...DELIVERY_OPTIONS, operationId: "sendWelcomeEmail" }),
      ),
      SAMPLE_DELIVERY,
    );
  });

  test("the bare verifier refuses a token for operation A on B's route", async () => {
    const headers = await sample();
    const message = /it is for operation "sendWelcomeEmail", but this route serves "recordEmailSent"/;
    await refusedDelivery(
      createDeliveryVerifier(DELIVERY_OPTIONS).verifyDelivery(headers, { operationId: "recordEmailSent" }),
      message,
      "verifier",
    );
    await refusedDelivery(
      verifyDelivery(headers, { ...DELIVERY_OPTIONS, operationId: "recordEmailSent" }),
      message,
      "one-shot",
    );
  });

  test("the bare verifier refuses when x-job-id, idempotency-key or x-job-attempt disagrees with the token or is missing", async () => {
    const verifier = createDeliveryVerifier(DELIVERY_OPTIONS);
    for (const { what, headers } of mismatches(await sample())) {
      await refusedDelivery(
        verifier.verifyDelivery(headers, { operationId: "sendWelcomeEmail" }),
        /^invalid delivery token: it is for (job|attempt)/,
        what,
      );
    }
  });

  test("the bare verifier refuses, whatever the token, when no operationId is given", async () => {
    const headers = await sample();
    const verifier = createDeliveryVerifier(DELIVERY_OPTIONS);
    const message = /needs the operationId of the route being served/;
    // Each as a JavaScript caller (or a cast) could write it: the type requires the argument, the code still checks.
    await refusedDelivery(
      (verifier.verifyDelivery as (h: unknown) => Promise<unknown>)(headers),
      message,
      "no argument",
    );
    await refusedDelivery(verifier.verifyDelivery(headers, {} as DeliveryExpectation), message, "no operationId");
    await refusedDelivery(verifier.verifyDelivery(headers, { operationId: "" }), message, "an empty operationId");
    await refusedDelivery(
      verifyDelivery(headers, DELIVERY_OPTIONS as DeliveryVerifierOptions & DeliveryExpectation),
      message,
      "one-shot",
    );
  });

  test("the Fastify plugin refuses a token for operation A on B's route, and the handler does not run", async (t) => {
    const handled: string[] = [];
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (_request, reply) => {
        handled.push("sendWelcomeEmail");
        return reply.code(204).send();
      });
      // Declared in the route's config rather than its schema: the plugin reads either.
      background.put(
        "/emails/:emailId/record",
        { config: { operationId: "recordEmailSent" } },
        async (_request, reply) => {
          handled.push("recordEmailSent");
          return reply.code(204).send();
        },
      );
    });
    const welcome = await sample();
    const wrong = await fetch(`${targetUrl}/emails/e1/record`, { method: "PUT", headers: welcome });
    assert.equal(wrong.status, 401);
    const body = (await wrong.json()) as { code: string; message: string };
    assert.equal(body.code, "invalid_delivery_token");
    assert.match(body.message, /it is for operation "sendWelcomeEmail", but this route serves "recordEmailSent"/);
    assert.deepEqual(handled, []);

    assert.equal(
      (await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers: welcome })).status,
      204,
    );
    const record = await sample({ ...SAMPLE_DELIVERY, operationId: "recordEmailSent" });
    assert.equal((await fetch(`${targetUrl}/emails/e1/record`, { method: "PUT", headers: record })).status, 204);
    assert.equal((await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers: record })).status, 401);
    assert.deepEqual(handled, ["sendWelcomeEmail", "recordEmailSent"]);
  });

  test("the Fastify plugin refuses a replay with a fresh idempotency-key and every other header mismatch, and the handler does not run", async (t) => {
    let handled = 0;
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (_request, reply) => {
        handled++;
        return reply.code(204).send();
      });
    });
    for (const { what, headers } of mismatches(await sample())) {
      const res = await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers });
      assert.equal(res.status, 401, what);
      assert.equal(((await res.json()) as { code: string }).code, "invalid_delivery_token", what);
    }
    assert.equal(handled, 0);
  });

  test("the Fastify plugin refuses every delivery to a route that declares no operationId, saying to declare it", async (t) => {
    let handled = 0;
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", async (_request, reply) => {
        handled++;
        return reply.code(204).send();
      });
    });
    const res = await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers: await sample() });
    assert.equal(res.status, 401);
    const body = (await res.json()) as { code: string; message: string };
    assert.equal(body.code, "invalid_delivery_token");
    assert.match(body.message, /route POST \/users\/:userId\/welcome-email declares no operationId/);
    assert.match(body.message, /schema: \{ operationId \} or config: \{ operationId \}/);
    assert.equal(handled, 0);
  });

  test("the Express middleware refuses a token for operation A where it guards B, and any header mismatch; next is not called", async (t) => {
    const welcome = opqueueDeliveryMiddleware({ ...DELIVERY_OPTIONS, operationId: "sendWelcomeEmail" });
    const record = opqueueDeliveryMiddleware({ ...DELIVERY_OPTIONS, operationId: "recordEmailSent" });
    const nexts: string[] = [];
    const targetUrl = await startHttpTarget(t, (req, res) => {
      const [middleware, name] = req.url?.startsWith("/emails/")
        ? [record, "recordEmailSent"]
        : [welcome, "sendWelcomeEmail"];
      middleware(req, res, () => {
        nexts.push(name);
        res.statusCode = 204;
        res.end();
      });
    });
    const headers = await sample();
    const wrong = await fetch(`${targetUrl}/emails/e1/record`, { method: "PUT", headers });
    assert.equal(wrong.status, 401);
    assert.match(((await wrong.json()) as { message: string }).message, /but this route serves "recordEmailSent"/);
    for (const { what, headers: changed } of mismatches(headers)) {
      const res = await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers: changed });
      assert.equal(res.status, 401, what);
      assert.equal(((await res.json()) as { code: string }).code, "invalid_delivery_token", what);
    }
    assert.deepEqual(nexts, []);
    assert.equal((await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers })).status, 204);
    assert.deepEqual(nexts, ["sendWelcomeEmail"]);
  });

  test("the Express middleware with operationIdFor binds each request to the operation it names, and refuses one it names none for", async (t) => {
    const middleware = opqueueDeliveryMiddleware({
      ...DELIVERY_OPTIONS,
      operationIdFor: (req) =>
        req.url?.startsWith("/users/")
          ? "sendWelcomeEmail"
          : req.url?.startsWith("/emails/")
            ? "recordEmailSent"
            : undefined,
    });
    let nextCalls = 0;
    const targetUrl = await startHttpTarget(t, (req, res) => {
      middleware(req, res, () => {
        nextCalls++;
        res.statusCode = 204;
        res.end();
      });
    });
    const headers = await sample();
    assert.equal((await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers })).status, 204);
    assert.equal((await fetch(`${targetUrl}/emails/e1/record`, { method: "PUT", headers })).status, 401);
    const unnamed = await fetch(`${targetUrl}/reports`, { method: "POST", headers });
    assert.equal(unnamed.status, 401);
    assert.match(((await unnamed.json()) as { message: string }).message, /names no operationId for POST \/reports/);
    assert.equal(nextCalls, 1);
  });

  test("the Express middleware cannot be made without an operationId or operationIdFor", () => {
    for (const options of [DELIVERY_OPTIONS, { ...DELIVERY_OPTIONS, operationId: "" }]) {
      assert.throws(
        () => opqueueDeliveryMiddleware(options as DeliveryMiddlewareOptions),
        /needs the operationId of the route it guards/,
      );
    }
  });
});

describe("target side: one token, one spelling (docs/tokens.md, Revision 2)", () => {
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  /** Other spellings of a segment's bytes, each read as the same bytes by a lenient decoder (jose's included). */
  const respellings: Record<string, (segment: string) => string> = {
    "padded with =": (segment) => segment + "=".repeat(4 - (segment.length % 4)),
    "spelled with + and /": (segment) => segment.replaceAll("-", "+").replaceAll("_", "/"),
    "with a spare bit set": (segment) =>
      segment.slice(0, -1) + alphabet.charAt(alphabet.indexOf(segment.at(-1) ?? "") ^ 1),
    // A space cannot reach the verifier: "Bearer <token>" holds one token, without whitespace.
    "holding a character outside the alphabet": (segment) => `${segment.slice(0, 4)}!${segment.slice(4)}`,
    "holding a non-ASCII character": (segment) => `${segment.slice(0, 4)}\u0141${segment.slice(4)}`,
  };
  const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const sign = (input: string) => createHmac("sha256", TEST_DELIVERY_SECRET).update(input).digest("base64url");

  /** SAMPLE_DELIVERY's token with every segment re-spellable (a partial last group, a `-` or `_`), signed as spelled. */
  function respellableToken(): { header: string; payload: string; signature: string } {
    const now = Math.floor(Date.now() / 1000);
    for (let n = 0; n < 1000; n++) {
      const header = encode({ alg: "HS256", kid: "q1", typ: "JWT", pad: `???${n}` });
      const payload = encode({
        iss: "opqueue",
        aud: "product",
        sub: SAMPLE_DELIVERY.userId,
        op: SAMPLE_DELIVERY.operationId,
        job: SAMPLE_DELIVERY.jobId,
        att: SAMPLE_DELIVERY.attempt,
        rid: SAMPLE_DELIVERY.originalRequestId,
        authority: SAMPLE_DELIVERY.authority,
        iat: now,
        exp: now + 90,
        pad: `???${n}`,
      });
      const signature = sign(`${header}.${payload}`);
      if ([header, payload, signature].every((segment) => segment.length % 4 !== 0 && /[-_]/.test(segment)))
        return { header, payload, signature };
    }
    throw new Error("no token with respellable segments was found");
  }

  for (const segment of ["header", "payload", "signature"] as const) {
    test(`the delivery verifier refuses a token whose ${segment} is padded, spelled with + or /, has a spare bit set or holds a non-alphabet character`, async () => {
      const verifier = createDeliveryVerifier(DELIVERY_OPTIONS);
      const parts = respellableToken();
      const canonical = `${parts.header}.${parts.payload}.${parts.signature}`;
      const expected = { operationId: SAMPLE_DELIVERY.operationId };
      assert.deepEqual(
        withoutToken(await verifier.verifyDelivery(deliveryHeaders(SAMPLE_DELIVERY, canonical), expected)),
        SAMPLE_DELIVERY,
      );
      for (const [how, respell] of Object.entries(respellings)) {
        const changed = { ...parts, [segment]: respell(parts[segment]) };
        const input = `${changed.header}.${changed.payload}`;
        const token = segment === "signature" ? `${input}.${changed.signature}` : `${input}.${sign(input)}`;
        await assert.rejects(
          verifier.verifyDelivery(deliveryHeaders(SAMPLE_DELIVERY, token), expected),
          (error: unknown) => {
            assert.ok(error instanceof DeliveryTokenError, `${how}: ${String(error)}`);
            assert.match(
              error.message,
              new RegExp(`^invalid delivery token: the ${segment} is not canonical base64url`),
              how,
            );
            return true;
          },
        );
      }
    });
  }
});

describe("target side: verifying with the service's JWKS", () => {
  test("verifyDelivery with { jwksUrl, audience } accepts the deliveries of a service with an EdDSA delivery key", async (t) => {
    const { privateKey } = await generateKeyPair("EdDSA", { extractable: true });
    const privatePem = await exportPKCS8(privateKey);
    let jwksUrl = "";
    const verified = deferred<DeliveryContext>();
    const targetUrl = await startHttpTarget(t, (req, res) => {
      verifyDelivery(req.headers, { jwksUrl, audience: "product", operationId: "sendWelcomeEmail" }).then(
        (delivery) => {
          verified.resolve(delivery);
          res.statusCode = 204;
          res.end();
        },
        (error: unknown) => {
          res.statusCode = 401;
          res.end(String(error));
        },
      );
    });
    const s = await startDeliveringService(t, targetUrl, (raw) => {
      const auth = raw["auth"] as Record<string, unknown>;
      auth["delivery_key"] = { kid: "q-ed", alg: "EdDSA", private_key: privatePem };
    });
    jwksUrl = `${s.url}/.well-known/jwks.json`;
    const jwks = (await (await fetch(jwksUrl)).json()) as { keys: Array<{ kid: string; alg: string }> };
    assert.deepEqual(
      jwks.keys.map((key) => [key.kid, key.alg]),
      [["q-ed", "EdDSA"]],
    );

    const { job } = await clientOf(s).enqueue({ ...welcomeEmail(), caller: CALLER });
    assert.deepEqual(withoutToken(await verified.promise), deliveryOf(job));
    const finished = await s.deliveryFinished(job.id);
    assert.equal(finished.outcome, "succeeded");

    // A JWKS verifier does not take an HS256 token, even one signed with the right delivery secret.
    const verifier = createDeliveryVerifier({ jwksUrl, audience: "product" });
    const hsHeaders = deliveryHeaders(SAMPLE_DELIVERY, await deliveryToken(SAMPLE_DELIVERY));
    await assert.rejects(verifier.verifyDelivery(hsHeaders, { operationId: SAMPLE_DELIVERY.operationId }), {
      name: "DeliveryTokenError",
    });
  });
});

describe("target side: several delivery keys (docs/tokens.md, 'Rotating keys')", () => {
  /** The next delivery secret of a rotation; the test config's one (kid q1) is the previous. */
  const NEXT_SECRET = "the-next-delivery-secret-of-32-bytes-or-more";
  const BY_KID = {
    audience: "product",
    secrets: [
      { kid: "q2", secret: NEXT_SECRET },
      { kid: "q1", secret: TEST_DELIVERY_SECRET },
    ],
  };
  const WELCOME = { operationId: SAMPLE_DELIVERY.operationId };

  /** SAMPLE_DELIVERY's headers with a token made by `deliveryToken(SAMPLE_DELIVERY, options)`. */
  async function headersWith(options: Parameters<typeof deliveryToken>[1]): Promise<Record<string, string>> {
    return deliveryHeaders(SAMPLE_DELIVERY, await deliveryToken(SAMPLE_DELIVERY, options));
  }

  /** Asserts that `promise` rejects with a DeliveryTokenError (not a 503's DeliveryKeysUnavailableError) matching `message`. */
  async function refused(promise: Promise<unknown>, message: RegExp): Promise<void> {
    await assert.rejects(promise, (error: unknown) => {
      assert.ok(error instanceof DeliveryTokenError && error.name === "DeliveryTokenError", String(error));
      assert.match(error.message, message);
      return true;
    });
  }

  test("secrets as { kid, secret } accept each listed key's tokens, each checked with the key its kid names and no other", async () => {
    const verifier = createDeliveryVerifier(BY_KID);
    assert.deepEqual(
      withoutToken(await verifier.verifyDelivery(await headersWith({ kid: "q1" }), WELCOME)),
      SAMPLE_DELIVERY,
    );
    assert.deepEqual(
      withoutToken(await verifier.verifyDelivery(await headersWith({ kid: "q2", secret: NEXT_SECRET }), WELCOME)),
      SAMPLE_DELIVERY,
    );
    // Signed with a listed secret, but not the one its kid names: the other key is never tried.
    await refused(verifier.verifyDelivery(await headersWith({ kid: "q2" }), WELCOME), /signature verification failed/);
    await refused(verifier.verifyDelivery(await headersWith({ kid: null }), WELCOME), /names no kid/);
    await refused(verifier.verifyDelivery(await headersWith({ kid: "q9" }), WELCOME), /unknown kid "q9"/);
  });

  test("secrets as plain strings accept a token signed with any of them, whatever its kid, and refuse one signed with none", async () => {
    const verifier = createDeliveryVerifier({ audience: "product", secrets: [NEXT_SECRET, TEST_DELIVERY_SECRET] });
    assert.deepEqual(
      withoutToken(await verifier.verifyDelivery(await headersWith({ kid: null }), WELCOME)),
      SAMPLE_DELIVERY,
    );
    assert.deepEqual(
      withoutToken(await verifier.verifyDelivery(await headersWith({ kid: "any", secret: NEXT_SECRET }), WELCOME)),
      SAMPLE_DELIVERY,
    );
    await refused(
      verifier.verifyDelivery(await headersWith({ secret: "a-third-secret-that-is-32-bytes-long!!" }), WELCOME),
      /signature verification failed/,
    );
    // The second secret checks the signature; its other failure is the one reported.
    await refused(verifier.verifyDelivery(await headersWith({ audience: "opqueue" }), WELCOME), /"aud"/);
  });

  test("createDeliveryVerifier refuses at once options naming no key, two key forms, an empty or duplicated list, or mixed items", () => {
    const cases: Array<[unknown, RegExp]> = [
      [{ audience: "product" }, /exactly one of secret, secrets and jwksUrl; got none/],
      [
        { audience: "product", secret: TEST_DELIVERY_SECRET, secrets: [NEXT_SECRET] },
        /exactly one of .*; got secret, secrets/,
      ],
      [{ audience: "product", secrets: [] }, /non-empty list/],
      [
        {
          audience: "product",
          secrets: [
            { kid: "q1", secret: NEXT_SECRET },
            { kid: "q1", secret: TEST_DELIVERY_SECRET },
          ],
        },
        /"q1" is listed twice/,
      ],
      [
        { audience: "product", secrets: [{ kid: "q1", secret: NEXT_SECRET }, TEST_DELIVERY_SECRET] },
        /secrets\[1\] must be \{ kid, secret \}/,
      ],
      [
        { audience: "product", secrets: [{ kid: "q1", secret: "" }] },
        /secrets\[0\]\.secret must be a non-empty string/,
      ],
    ];
    for (const [options, message] of cases) {
      assert.throws(
        () => createDeliveryVerifier(options as DeliveryVerifierOptions),
        (error: unknown) => {
          assert.ok(error instanceof TypeError, String(error));
          assert.match(error.message, message);
          return true;
        },
      );
    }
  });

  test("with jwksUrl the token's kid picks the key of the set; a token naming no kid, or a kid the set lacks, is refused", async (t) => {
    const pairs = await Promise.all([generateKeyPair("EdDSA"), generateKeyPair("EdDSA"), generateKeyPair("EdDSA")]);
    const [d1, d2, unpublished] = pairs.map((pair) => ({ alg: "EdDSA" as const, key: pair.privateKey }));
    const published = [
      { ...(await exportJWK(pairs[0].publicKey)), kid: "d1", alg: "EdDSA", use: "sig" },
      { ...(await exportJWK(pairs[1].publicKey)), kid: "d2", alg: "EdDSA", use: "sig" },
    ];
    const jwksBase = await startHttpTarget(t, (_req, res) => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ keys: published }));
    });
    const verifier = createDeliveryVerifier({ audience: "product", jwksUrl: `${jwksBase}/.well-known/jwks.json` });
    for (const [kid, privateKey] of [
      ["d1", d1],
      ["d2", d2],
    ] as const) {
      assert.deepEqual(
        withoutToken(await verifier.verifyDelivery(await headersWith({ kid, privateKey }), WELCOME)),
        SAMPLE_DELIVERY,
        kid,
      );
    }
    await refused(verifier.verifyDelivery(await headersWith({ kid: null, privateKey: d1 }), WELCOME), /names no kid/);
    await refused(
      verifier.verifyDelivery(await headersWith({ kid: "d3", privateKey: unpublished }), WELCOME),
      /kid "d3" is not in opqueue's key set/,
    );
    await refused(
      verifier.verifyDelivery(await headersWith({ kid: "d1", privateKey: d2 }), WELCOME),
      /signature verification failed/,
    );
  });

  test("the Fastify plugin and the Express middleware take secrets by kid too", async (t) => {
    const fastifyUrl = await startFastifyTarget(t, BY_KID, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (_request, reply) =>
        reply.code(204).send(),
      );
    });
    const middleware = opqueueDeliveryMiddleware({ ...BY_KID, operationId: "sendWelcomeEmail" });
    const expressUrl = await startHttpTarget(t, (req, res) => {
      middleware(req, res, () => {
        res.statusCode = 204;
        res.end();
      });
    });
    for (const targetUrl of [fastifyUrl, expressUrl]) {
      const post = async (options: Parameters<typeof deliveryToken>[1]) =>
        (await fetch(`${targetUrl}/users/42/welcome-email`, { method: "POST", headers: await headersWith(options) }))
          .status;
      assert.equal(await post({ kid: "q1" }), 204);
      assert.equal(await post({ kid: "q2", secret: NEXT_SECRET }), 204);
      assert.equal(await post({ kid: "q9" }), 401);
    }
  });
});

describe("target side: answers that decide the outcome", () => {
  /** Runs one job through a Fastify target whose handler answers with `answer`; the finished delivery. */
  async function deliverWith(t: After, answer: (reply: FastifyReply) => unknown) {
    const targetUrl = await startFastifyTarget(t, DELIVERY_OPTIONS, (background) => {
      background.post("/users/:userId/welcome-email", implementing("sendWelcomeEmail"), async (_request, reply) =>
        answer(reply),
      );
    });
    const s = await startDeliveringService(t, targetUrl);
    const { job } = await clientOf(s).enqueue({ ...welcomeEmail(), caller: CALLER });
    const finished = await s.deliveryFinished(job.id);
    const row = await s.waitForJob(job.id, (candidate) => candidate.status !== "running", "the end of its attempt");
    return { finished, row };
  }

  test("neverRetry(reply) with a 500 ends the job dead, rejected-by-endpoint", async (t) => {
    const { finished, row } = await deliverWith(t, (reply) => {
      neverRetry(reply);
      return reply.code(500).send({ message: "this will not work out" });
    });
    assert.equal(finished.outcome, "dead");
    assert.equal(row.status, "dead");
    assert.equal(row.result?.terminal_reason, "rejected-by-endpoint");
    assert.equal(row.result?.status_code, 500);
  });

  test("authUnresolvable() sent as the answer ends the job dead, auth-unresolvable", async (t) => {
    const { finished, row } = await deliverWith(t, (reply) => {
      const { statusCode, body } = authUnresolvable("user 42 was deleted");
      return reply.code(statusCode).send(body);
    });
    assert.equal(finished.outcome, "dead");
    assert.equal(row.status, "dead");
    assert.equal(row.result?.terminal_reason, "auth-unresolvable");
    assert.equal(row.result?.status_code, 401);
    assert.match(row.result?.error_body ?? "", /user 42 was deleted/);
  });

  test("alwaysRetry(reply) with a 400 leads to retrying", async (t) => {
    const { finished, row } = await deliverWith(t, (reply) => {
      alwaysRetry(reply);
      return reply.code(400).send({ message: "not yet" });
    });
    assert.equal(finished.outcome, "retrying");
    assert.equal(row.status, "retrying");
    assert.equal(row.attempt, 1);
    assert.equal(row.result?.status_code, 400);
    assert.equal(row.result?.terminal_reason, null);
    assert.ok(row.runAt > Date.now(), "the retry is due later");
  });
});

/**
 * Flow control's routes (docs/flow-control.md): pause and resume an operation or a concurrency key, set and reset an
 * operation's limits, list the paused keys, cancel jobs by filter. Each route parses, authorises, calls one of
 * src/admin/flow-control.ts's use cases and answers; every node reads what they write from the database at its next claim.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { ApiError } from "../../errors.js";
import type { FlowControl } from "../../admin/flow-control.js";
import type { OperationLimits } from "../../flow/limits.js";
import {
  CancelJobsBody,
  LimitsPatch,
  OperationControlBody,
  PausedKeyBody,
  patchLimits,
  wireControl,
  wirePausedKey,
} from "../../flow/schemas.js";
import { JobsEnvelope } from "../../job/schemas.js";
import { toWireJob } from "../../job/wire.js";
import {
  actingAs,
  actorFields,
  actorOf,
  requireOperationInScope,
  requireUnlimited,
  type AdminAccess,
} from "../auth.js";
import { errorResponses } from "./error-responses.js";
import type { RequestRedaction } from "../../job/redaction.js";

/** What the flow control routes need. */
export interface FlowRoutesOptions {
  flowControl: FlowControl;
  access: AdminAccess;
  /** How jobs' requests are shown. */
  redaction: RequestRedaction;
}

const OperationParams = Type.Object({ id: Type.String({ description: "The operation's operationId." }) });
const KeyParams = Type.Object({
  key: Type.String({ minLength: 1, maxLength: 256, description: "The concurrency key." }),
});
const OperationEnvelope = Type.Object({ operation: OperationControlBody }, { additionalProperties: false });
const PausedKeyEnvelope = Type.Object({ key: PausedKeyBody }, { additionalProperties: false });
const PausedKeyList = Type.Object({ keys: Type.Array(PausedKeyBody) }, { additionalProperties: false });
const ResumedKey = Type.Object(
  { concurrency_key: Type.String(), resumed: Type.Boolean({ description: "false: the key was not paused." }) },
  { additionalProperties: false },
);

/** Registers the flow control routes. */
export const flowRoutes: FastifyPluginAsyncTypebox<FlowRoutesOptions> = async (app, options) => {
  const { flowControl } = options;
  const viewer = options.access.needs("viewer");
  const operator = options.access.needs("operator");
  const security = [{ adminToken: [] }];

  /** Refuses a key PostgreSQL could not store (U+0000) as the enqueue does. */
  const checkedKey = (key: string): string => {
    if (key.includes("\u0000")) throw new ApiError(400, "invalid_request", "a concurrency key cannot contain U+0000");
    return key;
  };

  for (const action of ["pause", "resume"] as const) {
    app.post(
      `/operations/:id/${action}`,
      {
        onRequest: operator,
        schema: {
          operationId: action === "pause" ? "pauseOperation" : "resumeOperation",
          summary:
            action === "pause"
              ? "Pause an operation: no node claims its jobs until it is resumed (enqueues are still accepted)"
              : "Resume a paused operation: its due jobs are claimed at once",
          tags: ["flow control"],
          security,
          params: OperationParams,
          response: { 200: OperationEnvelope, ...errorResponses(401, 403, 404, 503) },
        },
      },
      async (request) => {
        const operationId = request.params.id;
        requireOperationInScope(request, operationId);
        const actor = actorOf(request);
        const control =
          action === "pause"
            ? await flowControl.pauseOperation({ operationId, actor })
            : await flowControl.resumeOperation({ operationId });
        request.log.info({ ...actorFields(request), action: `${action}-operation`, operationId }, "admin action");
        return { operation: wireControl(control) };
      },
    );
  }

  app.patch(
    "/operations/:id/limits",
    {
      onRequest: operator,
      schema: {
        operationId: "setOperationLimits",
        summary: "Change an operation's limits at runtime (null removes one); kept across restarts until reset",
        tags: ["flow control"],
        security,
        params: OperationParams,
        body: LimitsPatch,
        response: { 200: OperationEnvelope, ...errorResponses(400, 401, 403, 404, 503) },
      },
    },
    async (request) => {
      const operationId = request.params.id;
      requireOperationInScope(request, operationId);
      const actor = actorOf(request);
      const change = (current: OperationLimits) => patchLimits(current, request.body);
      const control = await flowControl.setLimits({ operationId, change, actor });
      request.log.info(
        { ...actorFields(request), action: "set-limits", operationId, limits: request.body },
        "admin action",
      );
      return { operation: wireControl(control) };
    },
  );

  app.delete(
    "/operations/:id/limits",
    {
      onRequest: operator,
      schema: {
        operationId: "resetOperationLimits",
        summary: "Put an operation's limits back to the configuration's",
        tags: ["flow control"],
        security,
        params: OperationParams,
        response: { 200: OperationEnvelope, ...errorResponses(401, 403, 404, 503) },
      },
    },
    async (request) => {
      const operationId = request.params.id;
      requireOperationInScope(request, operationId);
      const actor = actorOf(request);
      const control = await flowControl.resetLimits({ operationId, actor });
      request.log.info({ ...actorFields(request), action: "reset-limits", operationId }, "admin action");
      return { operation: wireControl(control) };
    },
  );

  app.get(
    "/concurrency-keys/paused",
    {
      onRequest: viewer,
      schema: {
        operationId: "listPausedKeys",
        summary: "The paused concurrency keys, by key",
        tags: ["flow control"],
        security,
        response: { 200: PausedKeyList, ...errorResponses(401, 403, 503) },
      },
    },
    async () => ({ keys: (await flowControl.pausedKeys()).map(wirePausedKey) }),
  );

  app.post(
    "/concurrency-keys/:key/pause",
    {
      onRequest: operator,
      schema: {
        operationId: "pauseConcurrencyKey",
        summary: "Pause a concurrency key: no job with it is claimed, of any operation, until it is resumed",
        tags: ["flow control"],
        security,
        params: KeyParams,
        response: { 200: PausedKeyEnvelope, ...errorResponses(400, 401, 403, 503) },
      },
    },
    async (request) => {
      const key = checkedKey(request.params.key);
      requireUnlimited(request, "a concurrency key");
      const actor = actorOf(request);
      const paused = await flowControl.pauseKey({ key, actor });
      request.log.info({ ...actorFields(request), action: "pause-key", concurrencyKey: key }, "admin action");
      return { key: wirePausedKey(paused) };
    },
  );

  app.post(
    "/concurrency-keys/:key/resume",
    {
      onRequest: operator,
      schema: {
        operationId: "resumeConcurrencyKey",
        summary: "Resume a paused concurrency key",
        tags: ["flow control"],
        security,
        params: KeyParams,
        response: { 200: ResumedKey, ...errorResponses(400, 401, 403, 503) },
      },
    },
    async (request) => {
      const key = checkedKey(request.params.key);
      requireUnlimited(request, "a concurrency key");
      const resumed = await flowControl.resumeKey({ key });
      request.log.info({ ...actorFields(request), action: "resume-key", concurrencyKey: key }, "admin action");
      return { concurrency_key: key, resumed };
    },
  );

  app.post(
    "/jobs/cancel",
    {
      onRequest: operator,
      schema: {
        operationId: "cancelJobs",
        summary:
          "Cancel the jobs matching a filter, newest first, up to `limit`; running ones have their delivery aborted",
        tags: ["jobs"],
        security,
        body: CancelJobsBody,
        response: { 200: JobsEnvelope, ...errorResponses(400, 401, 403, 503) },
      },
    },
    async (request) => {
      const body = request.body;
      const filters = [
        body.operation_id,
        body.original_request_id,
        body.user_id,
        body.dedupe_key,
        body.created_after,
        body.created_before,
      ];
      if (filters.every((value) => value === undefined)) {
        throw new ApiError(
          400,
          "invalid_request",
          "give at least one filter besides statuses (operation_id, original_request_id, user_id, dedupe_key, created_after, created_before)",
        );
      }
      if (body.operation_id === undefined) requireUnlimited(request, "a bulk cancel without operation_id");
      else requireOperationInScope(request, body.operation_id);
      const time = (value: string | undefined) => (value === undefined ? undefined : Date.parse(value));
      const jobs = await flowControl.cancelJobs({
        filter: {
          statuses: body.statuses ?? ["pending", "retrying"],
          operationId: body.operation_id,
          originalRequestId: body.original_request_id,
          userId: body.user_id,
          dedupeKey: body.dedupe_key,
          createdFrom: time(body.created_after),
          createdBefore: time(body.created_before),
        },
        limit: body.limit ?? 100,
        ...actingAs(request),
      });
      request.log.info(
        { ...actorFields(request), action: "cancel-many", jobIds: jobs.map((job) => job.id) },
        "admin action",
      );
      return { jobs: jobs.map((row) => toWireJob(row, options.redaction)) };
    },
  );
};

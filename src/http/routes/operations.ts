/**
 * `GET /operations` (docs/api.md, "Operations"): the background operations of the product's OpenAPI document, the
 * ones a job can target, with the attempts and timeout each gets, and each one's flow control as the database holds it
 * now (docs/flow-control.md). The dashboard fills its operation filter and its flow control tab from it.
 */
import { Type, type Static } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { NO_LIMITS, type OperationControl } from "../../flow/limits.js";
import { OperationControlBody, wireControl } from "../../flow/schemas.js";
import { ErrorBody } from "../../job/schemas.js";
import type { FlowStore } from "../../store/store.js";
import type { OperationRegistry } from "../../operations/registry.js";
import type { PerOperationSettings } from "../../operations/settings.js";
import type { AdminAccess } from "../auth.js";

/** One background operation as `GET /operations` lists it. */
export const OperationSummary = Type.Object(
  {
    operation_id: Type.String({ description: "The operation's operationId in the product's OpenAPI document." }),
    method: Type.String({ description: "The HTTP method of a delivery, upper case." }),
    path: Type.String({ description: "The path template, as the document writes it." }),
    max_attempts: Type.Integer({
      minimum: 1,
      description: "Attempts before a job goes dead (operations.<id>.max_attempts, else defaults).",
    }),
    timeout_ms: Type.Integer({
      minimum: 1,
      description: "Time allowed for one attempt (operations.<id>.timeout_ms, else defaults).",
    }),
    control: Type.Omit(OperationControlBody, ["operation_id"], {
      additionalProperties: false,
      description: "Its pause and limits in force (docs/flow-control.md).",
    }),
  },
  { additionalProperties: false },
);

/** `{ operations }`: every background operation, sorted by operation_id. */
export const OperationList = Type.Object({ operations: Type.Array(OperationSummary) }, { additionalProperties: false });
/** The answer of `GET /operations`. */
export type OperationList = Static<typeof OperationList>;

/** What the operations route needs. */
export interface OperationRoutesOptions {
  registry: OperationRegistry;
  settings: PerOperationSettings;
  access: AdminAccess;
  store: Pick<FlowStore, "operationControlList">;
}

/** The static part of the answer, built once: neither the document nor the settings change while the service runs. */
function listBackgroundOperations(options: {
  registry: OperationRegistry;
  settings: PerOperationSettings;
}): Array<Omit<OperationList["operations"][number], "control">> {
  const operations = options.registry
    .all()
    .filter((operation) => operation.background)
    .map((operation) => {
      const settings = options.settings.of(operation.operationId);
      return {
        operation_id: operation.operationId,
        method: operation.method,
        path: operation.path,
        max_attempts: settings.maxAttempts,
        timeout_ms: settings.timeoutMs,
      };
    })
    // Code-point order, the same in every locale.
    .sort((a, b) => (a.operation_id < b.operation_id ? -1 : a.operation_id > b.operation_id ? 1 : 0));
  return operations;
}

/** Registers `GET /operations`. */
export const operationRoutes: FastifyPluginAsyncTypebox<OperationRoutesOptions> = async (app, options) => {
  const operations = listBackgroundOperations(options);
  app.get(
    "/operations",
    {
      onRequest: options.access.needs("viewer"),
      schema: {
        operationId: "listOperations",
        summary:
          "The background operations a job can target, with their max attempts, timeout and flow control, by operation_id",
        tags: ["system"],
        security: [{ adminToken: [] }],
        response: { 200: OperationList, 401: ErrorBody, 403: ErrorBody, 503: ErrorBody },
      },
    },
    async () => {
      const controls = new Map(
        (await options.store.operationControlList()).map((control) => [control.operationId, control]),
      );
      return {
        operations: operations.map((operation) => {
          const control: OperationControl = controls.get(operation.operation_id) ?? {
            operationId: operation.operation_id,
            paused: null,
            limits: { ...NO_LIMITS },
            limitsSource: "config",
            limitsSet: null,
          };
          const { operation_id: _id, ...rest } = wireControl(control);
          return { ...operation, control: rest };
        }),
      };
    },
  );
};

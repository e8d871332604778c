/**
 * The schedules' routes (docs/schedules.md): list, get, create, update, pause, resume, delete and run now, for site
 * administrators. The config file's entries are listed beside the schedules created here, read-only. Each change is
 * logged as an "admin action" with the admin token's `sub`; every node's scheduler reads it from the database.
 */
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsyncTypebox } from "@fastify/type-provider-typebox";
import { JobEnvelope } from "../../job/schemas.js";
import { toWireJob } from "../../job/wire.js";
import type { Schedules } from "../../schedules/schedules.js";
import {
  fieldsOfCreateBody,
  patchFields,
  ScheduleCreateBody,
  ScheduleEnvelope,
  ScheduleList,
  SchedulePatchBody,
  wireSchedule,
} from "../../schedules/schemas.js";
import type { FastifyRequest } from "fastify";
import { actorFields, actorOf, requireOperationInScope, type AdminAccess } from "../auth.js";
import { errorResponses } from "./error-responses.js";
import type { RequestRedaction } from "../../job/redaction.js";

/** What the schedules' routes need. */
export interface ScheduleRoutesOptions {
  schedules: Schedules;
  access: AdminAccess;
  /** How schedules' and jobs' requests are shown. */
  redaction: RequestRedaction;
}

const NameParams = Type.Object({ name: Type.String({ minLength: 1, description: "The schedule's name." }) });

/**
 * A definition as the audit line shows it: every field but the jobs' `request`, which may carry a product's data and
 * up to 16 KiB of it; its presence is said instead.
 */
function auditable(body: Record<string, unknown>): Record<string, unknown> {
  const { request, ...rest } = body;
  return request === undefined ? rest : { ...rest, request: "(given)" };
}

/** Registers the schedules' routes. */
export const scheduleRoutes: FastifyPluginAsyncTypebox<ScheduleRoutesOptions> = async (app, options) => {
  const { schedules } = options;
  const viewer = options.access.needs("viewer");
  const operator = options.access.needs("operator");
  const admin = options.access.needs("admin");

  /** An operator limited to some operations acts only on the schedules of those operations. */
  const requireScheduleInScope = async (request: FastifyRequest, name: string): Promise<void> => {
    if (request.admin?.operations == null) return;
    requireOperationInScope(request, (await schedules.get(name)).fields.operationId);
  };
  const security = [{ adminToken: [] }];
  const tags = ["schedules"];

  app.get(
    "/schedules",
    {
      onRequest: viewer,
      schema: {
        operationId: "listSchedules",
        summary:
          "Every schedule, by name: the config file's cron entries (read-only) and those created through the API",
        tags,
        security,
        response: { 200: ScheduleList, ...errorResponses(401, 403, 503) },
      },
    },
    async () => ({ schedules: (await schedules.list()).map((view) => wireSchedule(view, options.redaction)) }),
  );

  app.post(
    "/schedules",
    {
      onRequest: admin,
      schema: {
        operationId: "createSchedule",
        summary: "Create a schedule: a job of a background operation enqueued at every tick of a cron expression",
        tags,
        security,
        body: ScheduleCreateBody,
        response: { 201: ScheduleEnvelope, ...errorResponses(400, 401, 403, 409, 422, 503) },
      },
    },
    async (request, reply) => {
      const actor = actorOf(request);
      const view = await schedules.create(fieldsOfCreateBody(request.body), actor);
      request.log.info(
        {
          ...actorFields(request),
          action: "create-schedule",
          schedule: view.fields.name,
          definition: auditable(request.body),
        },
        "admin action",
      );
      return reply.code(201).send({ schedule: wireSchedule(view, options.redaction) });
    },
  );

  app.get(
    "/schedules/:name",
    {
      onRequest: viewer,
      schema: {
        operationId: "getSchedule",
        summary: "One schedule, with its next and last runs",
        tags,
        security,
        params: NameParams,
        response: { 200: ScheduleEnvelope, ...errorResponses(401, 403, 404, 503) },
      },
    },
    async (request) => ({ schedule: wireSchedule(await schedules.get(request.params.name), options.redaction) }),
  );

  app.patch(
    "/schedules/:name",
    {
      onRequest: admin,
      schema: {
        operationId: "updateSchedule",
        summary:
          "Change a schedule's definition (the fields given; null removes a key); it ticks by the new one from its next tick",
        tags,
        security,
        params: NameParams,
        body: SchedulePatchBody,
        response: { 200: ScheduleEnvelope, ...errorResponses(400, 401, 403, 404, 409, 422, 503) },
      },
    },
    async (request) => {
      const actor = actorOf(request);
      const view = await schedules.update(
        request.params.name,
        (current) => {
          const patched = patchFields(current, request.body);
          // A request read redacted and sent back keeps the stored values its placeholders stand for.
          const kept = options.redaction.restored(patched.operationId, patched.request, current.request);
          return { ...patched, request: kept };
        },
        actor,
      );
      request.log.info(
        {
          ...actorFields(request),
          action: "update-schedule",
          schedule: view.fields.name,
          changes: auditable(request.body),
        },
        "admin action",
      );
      return { schedule: wireSchedule(view, options.redaction) };
    },
  );

  for (const action of ["pause", "resume"] as const) {
    app.post(
      `/schedules/:name/${action}`,
      {
        onRequest: operator,
        schema: {
          operationId: action === "pause" ? "pauseSchedule" : "resumeSchedule",
          summary:
            action === "pause"
              ? "Pause a schedule: its ticks enqueue nothing until it is resumed"
              : "Resume a paused schedule: it ticks again from its next tick (the ticks it missed are not enqueued)",
          tags,
          security,
          params: NameParams,
          response: { 200: ScheduleEnvelope, ...errorResponses(401, 403, 404, 409, 503) },
        },
      },
      async (request) => {
        const actor = actorOf(request);
        const { name } = request.params;
        await requireScheduleInScope(request, name);
        const view = action === "pause" ? await schedules.pause(name, actor) : await schedules.resume(name);
        request.log.info({ ...actorFields(request), action: `${action}-schedule`, schedule: name }, "admin action");
        return { schedule: wireSchedule(view, options.redaction) };
      },
    );
  }

  app.delete(
    "/schedules/:name",
    {
      onRequest: admin,
      schema: {
        operationId: "deleteSchedule",
        summary: "Delete a schedule; answers it as it was (its jobs stay)",
        tags,
        security,
        params: NameParams,
        response: { 200: ScheduleEnvelope, ...errorResponses(401, 403, 404, 409, 503) },
      },
    },
    async (request) => {
      const view = await schedules.delete(request.params.name);
      request.log.info(
        { ...actorFields(request), action: "delete-schedule", schedule: view.fields.name },
        "admin action",
      );
      return { schedule: wireSchedule(view, options.redaction) };
    },
  );

  app.post(
    "/schedules/:name/run-now",
    {
      onRequest: operator,
      schema: {
        operationId: "runScheduleNow",
        summary:
          "Enqueue one job of a schedule now (paused or not, config entry or not), in a chain of its own; not a tick",
        tags,
        security,
        params: NameParams,
        response: { 200: JobEnvelope, 201: JobEnvelope, ...errorResponses(401, 403, 404, 409, 422, 429, 503) },
      },
    },
    async (request, reply) => {
      const { name } = request.params;
      await requireScheduleInScope(request, name);
      const result = await schedules.runNow(name);
      request.log.info(
        {
          ...actorFields(request),
          action: "run-schedule-now",
          schedule: name,
          jobId: result.job.id,
          outcome: result.kind,
        },
        "admin action",
      );
      return reply.code(result.kind === "created" ? 201 : 200).send({ job: toWireJob(result.job, options.redaction) });
    },
  );
};

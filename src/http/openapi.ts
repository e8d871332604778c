/**
 * The service's own OpenAPI 3.1 document, generated from the route schemas (the one source of validation,
 * types and documentation). Routes are collected as they are registered.
 */
import type { FastifyInstance, RouteOptions } from "fastify";
import { VERSION } from "../version.js";
import { requiredRoleOf } from "./auth.js";

declare module "fastify" {
  interface FastifySchema {
    /** OpenAPI operationId. */
    operationId?: string;
    /** OpenAPI summary. */
    summary?: string;
    /** OpenAPI description. */
    description?: string;
    /** OpenAPI tags. */
    tags?: string[];
    /** OpenAPI security requirements. */
    security?: Array<Record<string, string[]>>;
    /** Left out of the document. */
    hide?: boolean;
    /** The media type of the 200 answer, when it is a file rather than JSON. */
    produces?: string;
  }
}

type JsonSchema = { properties?: Record<string, unknown>; required?: string[] } & Record<string, unknown>;

/** Drops TypeBox's non-JSON markers and keeps only what JSON carries. */
function plain(schema: unknown): JsonSchema {
  return JSON.parse(JSON.stringify(schema)) as JsonSchema;
}

function parameters(schema: unknown, where: "path" | "query"): object[] {
  if (schema === undefined) return [];
  const object = plain(schema);
  const required = new Set(object.required ?? []);
  return Object.entries(object.properties ?? {}).map(([name, property]) => {
    const { description, ...rest } = property as JsonSchema;
    return {
      name,
      in: where,
      required: where === "path" || required.has(name),
      ...(description === undefined ? {} : { description }),
      schema: rest,
      ...(where === "query" && (rest as { type?: string }).type === "array" ? { style: "form", explode: true } : {}),
    };
  });
}

const REASONS: Record<string, string> = {
  200: "OK",
  201: "Created",
  400: "Invalid request",
  401: "Missing or invalid credentials",
  403: "Not allowed",
  404: "Not found",
  409: "Conflict with the job's state",
  413: "Body larger than 1 MiB",
  415: "Body is not application/json",
  422: "Target operation cannot be enqueued",
  429: "Spawn cap exceeded",
  503: "Database unavailable; retry after Retry-After seconds",
};

/** Collects routes as they are added and builds the document on demand. */
export function collectOpenApi(app: FastifyInstance): () => object {
  const routes: RouteOptions[] = [];
  app.addHook("onRoute", (route) => {
    if (route.schema && !route.schema.hide && route.method !== "HEAD") routes.push(route);
  });
  let document: object | undefined;
  return () => {
    document ??= build(routes);
    return document;
  };
}

function build(routes: RouteOptions[]): object {
  const paths: Record<string, Record<string, object>> = {};
  for (const route of routes) {
    const schema = route.schema ?? {};
    const path = route.url.replace(/:([A-Za-z0-9_]+)/g, "{$1}");
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    const okMediaType = schema.produces ?? (path === "/metrics" ? "text/plain" : "application/json");
    const responses = Object.fromEntries(
      Object.entries((schema.response ?? {}) as Record<string, unknown>).map(([status, body]) => [
        status,
        {
          description: REASONS[status] ?? "Response",
          content: { [status === "200" ? okMediaType : "application/json"]: { schema: plain(body) } },
        },
      ]),
    );
    // The role an admin route needs, read off its auth hook: stated where it is enforced, and nowhere else.
    const role = requiredRoleOf(route.onRequest);
    const roleNote =
      role === undefined ? undefined : `Needs an admin token with role ${role}${role === "admin" ? "" : " or above"}.`;
    const description = [schema.description, roleNote].filter((part) => part !== undefined).join(" ");
    for (const method of methods) {
      paths[path] ??= {};
      paths[path][method.toLowerCase()] = {
        ...(schema.operationId ? { operationId: schema.operationId } : {}),
        ...(schema.summary ? { summary: schema.summary } : {}),
        ...(description === "" ? {} : { description }),
        ...(role === undefined ? {} : { "x-opqueue-role": role }),
        ...(schema.tags ? { tags: schema.tags } : {}),
        ...(schema.security ? { security: schema.security } : { security: [] }),
        parameters: [...parameters(schema.params, "path"), ...parameters(schema.querystring, "query")],
        ...(schema.body
          ? { requestBody: { required: true, content: { "application/json": { schema: plain(schema.body) } } } }
          : {}),
        responses,
      };
    }
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "opqueue",
      version: VERSION,
      description: "A durable background job queue that delivers jobs to the product's operations over HTTP.",
    },
    paths,
    components: {
      securitySchemes: {
        enqueueAssertion: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description:
            "Enqueue assertion: aud, exp, iat (lifetime ≤ 300 s), sub, op, rid unless job. rid is 1..255 characters of " +
            "visible ASCII (%x21-7E), neither . nor ..; every segment is canonical unpadded base64url.",
        },
        deliveryToken: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description:
            "The delivery token an attempt was sent with (iss opqueue, aud target.audience, job, att, jti), on a target's " +
            "calls on that attempt: unexpired, or once the attempt was taken asynchronously, that very token even expired.",
        },
        adminToken: {
          type: "http",
          scheme: "bearer",
          bearerFormat: "JWT",
          description:
            "Admin token: aud, sub, exp (lifetime ≤ 24 h); role viewer, operator or admin (site_admin: true without a " +
            "role means admin); ops, an operator's list of operations; jti and iat, by which it can be revoked. Each " +
            "operation states the role it needs (x-opqueue-role). Every segment is canonical unpadded base64url.",
        },
      },
    },
  };
}

/**
 * The HTTP limit: a bare Fastify route that parses the enqueue body (JSON, no schema) and answers 201 with a small
 * JSON body. Nothing is validated or stored. Ready info: `{port}`.
 */
import { randomBytes } from "node:crypto";
import { listenApp } from "../lib/peer-common.js";
import { serveCommands } from "../lib/ipc.js";

const { app, port } = await listenApp((app) => {
  app.post("/jobs", async (request, reply) => {
    const body = request.body as { operation_id?: unknown };
    return reply
      .code(201)
      .send({ job: { id: randomBytes(12).toString("base64url"), operation_id: body.operation_id } });
  });
});

serveCommands({}, { port }, () => app.close());

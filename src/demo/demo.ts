/**
 * `npm start` (`opqueue demo`): opqueue on SQLite plus the example product app, with a sign-up every few
 * seconds so a newcomer sees jobs flow, retry after a 503, chain, and run on a cron schedule.
 */
import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import { request } from "undici";
import { mintToken } from "../auth/tokens.js";
import { systemClock } from "../clock.js";
import { loadConfigFile, type ConfigEnv } from "../config.js";
import { signInLink } from "../http/routes/ui.js";
import { createLogger, serve, stopOnSignals } from "../serve.js";
import { VERSION } from "../version.js";
import { buildProductApp } from "./product-app.js";

const DEMO_CONFIG = fileURLToPath(new URL("../../examples/demo/opqueue.yaml", import.meta.url));
/** Seconds between simulated sign-ups. */
const SIGNUP_EVERY_MS = 5000;
/** The demo stops signing users up after this many, so a forgotten terminal does not grow the database forever. */
const MAX_SIGNUPS = 60;
const NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"];

/** Runs the demo until SIGINT/SIGTERM. */
export async function runDemo(): Promise<void> {
  // The database is the config's own (examples/demo/data/opqueue-demo.db), so `npm start` and
  // `opqueue serve --config examples/demo/opqueue.yaml` open the same one.
  const env: ConfigEnv = { ...process.env };
  // The service's own JSON logs stay quiet unless asked for; the demo prints readable lines instead.
  process.env["OPQUEUE_LOG_LEVEL"] ??= "warn";
  const { config, path } = loadConfigFile({ path: DEMO_CONFIG, env });
  const logger = createLogger();
  const running = await serve({ config, api: true, worker: true, logger });
  const url = running.url ?? "";
  const say = (line: string) => console.log(`${new Date().toISOString().slice(11, 23)}  ${line}`);

  running.service.telemetry.on("delivery:finished", (event) => {
    const status = event.statusCode === undefined ? "no response" : `HTTP ${event.statusCode}`;
    const what =
      event.outcome === "retrying"
        ? "will retry"
        : event.outcome === "dead"
          ? `dead (${event.terminalReason})`
          : "succeeded";
    say(`opqueue: delivered ${event.operationId} job ${event.jobId} attempt ${event.attempt}: ${status}, ${what}`);
  });
  running.service.telemetry.on("cron:tick", (event) => {
    say(`opqueue: cron "${event.name}" tick ${new Date(event.tickAt).toISOString()}: ${event.outcome}`);
  });

  const product = await buildProductApp({ config, opqueueUrl: url, log: say });
  const target = new URL(config.target.base_url);
  await product.listen({ host: target.hostname, port: Number(target.port) });

  let signups = 0;
  const signUp = () => {
    const name = `${NAMES[signups % NAMES.length]}-${randomUUID().slice(0, 4)}`;
    signups++;
    request(`${config.target.base_url}/users`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name }),
    })
      .then((response) => response.body.dump())
      .catch((error: unknown) => say(`demo: sign-up failed: ${(error as Error).message}`));
    if (signups >= MAX_SIGNUPS) {
      clearInterval(traffic);
      say(
        `demo: ${MAX_SIGNUPS} sign-ups done; the product signs no more users up (opqueue and the product keep running: enqueue, cron and the dashboard work as before; restart npm start for more)`,
      );
    }
  };
  const traffic = setInterval(signUp, SIGNUP_EVERY_MS);
  stopOnSignals(running, logger, async () => {
    clearInterval(traffic);
    await product.close();
  });

  const admin = await mintToken({
    auth: config.auth,
    clock: systemClock,
    sub: "admin",
    siteAdmin: true,
    ttlSeconds: 86_400,
  });
  const assertion = await mintToken({
    auth: config.auth,
    clock: systemClock,
    sub: "alice",
    op: "createUser",
    rid: `demo-${randomUUID().slice(0, 8)}`,
    ttlSeconds: 300,
  });
  const body = JSON.stringify({
    operation_id: "sendWelcomeEmail",
    request: { path_params: { userId: "alice" }, body: { email: "alice@example.com" } },
    dedupe_key: "welcome:alice",
    delay_ms: 60_000,
  });
  console.log(`
opqueue ${VERSION} demo
  opqueue:        ${url}   (config ${path})
  database:       ${config.database}
  demo product:   ${config.target.base_url}   (signs a user up every ${SIGNUP_EVERY_MS / 1000} s; cron "daily-report" runs every minute)

Enqueue a job yourself, due in a minute (the assertion is valid for 5 minutes). The same call again answers 200:
the waiting job holds its dedupe key, so it is refreshed, not duplicated. Cancel it with the admin token below.

  curl -s -X POST ${url}/jobs \\
    -H 'content-type: application/json' \\
    -H 'authorization: Bearer ${assertion}' \\
    -d '${body}'

Dashboard, signed in as a site administrator for 24 hours: ${signInLink(`${url}/ui/`, admin)}

Look at the jobs as a site administrator (the token is valid for 24 hours):

  export OPQUEUE_ADMIN_TOKEN='${admin}'
  curl -s '${url}/jobs?limit=5' -H "authorization: Bearer $OPQUEUE_ADMIN_TOKEN"
  curl -s -X POST ${url}/jobs/JOB_ID/cancel -H "authorization: Bearer $OPQUEUE_ADMIN_TOKEN"

Fresh tokens: npx opqueue token --config ${path} --sub alice --op createUser --rid "signup-$(date +%s%N)"
API document: ${url}/openapi.json   Metrics: ${url}/metrics   Stop: Ctrl-C
`);
  signUp();
}

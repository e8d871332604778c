/**
 * One LISTEN connection per node for `opqueue_jobs:<schema>` notifications (sent by `opqueue_notify`, once per
 * insert batch or admin retry). It lives outside the pool, reconnects by itself with backoff when the connection
 * drops (database restart, `pg_terminate_backend`), and after reconnecting calls back once, since notifications
 * sent while it was away are lost and a missed one must not leave a due job waiting for the poll. A store keeps its
 * listeners (the jobs' channel, the schedules' channel) in a `StoreListeners`.
 */
import pg from "pg";
import type { ConnectionSettings } from "./connection.js";
import { mapError } from "./errors.js";

/** Backoff between reconnection attempts. */
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5000;

/** A reconnecting LISTEN connection. */
export class NotificationListener {
  private client: pg.Client | undefined;
  private stopped = false;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private delayMs = RECONNECT_MIN_MS;

  constructor(
    private readonly options: {
      url: string;
      applicationName: string;
      /** Connection options (search path, time zone), as the pool uses. */
      connectionOptions: string;
      channel: string;
      /** A notification on the channel, with the server process id of the connection that sent it. */
      onNotify: (payload: string | undefined, sender: number) => void;
      /** Called after a reconnection, when notifications may have been missed. */
      onReconnect: () => void;
      onError?: (error: Error) => void;
    },
  ) {}

  /** Connects and listens; resolves once listening (or rejects if the first connection fails). */
  async start(): Promise<void> {
    await this.connect();
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({
      connectionString: this.options.url,
      application_name: this.options.applicationName,
      options: this.options.connectionOptions,
      connectionTimeoutMillis: 5000,
      keepAlive: true,
    });
    client.on("notification", (message) => {
      if (message.channel === this.options.channel) this.options.onNotify(message.payload, message.processId);
    });
    client.on("error", (error) => {
      this.options.onError?.(error);
      this.scheduleReconnect(client);
    });
    client.on("end", () => this.scheduleReconnect(client));
    try {
      await client.connect();
      await client.query(`LISTEN ${pg.escapeIdentifier(this.options.channel)}`);
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
    this.client = client;
    this.delayMs = RECONNECT_MIN_MS;
  }

  private scheduleReconnect(client: pg.Client): void {
    if (this.stopped || this.client !== client || this.reconnectTimer) return;
    this.client = undefined;
    client.end().catch(() => undefined);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.connect().then(
        () => this.options.onReconnect(),
        (error: unknown) => {
          this.options.onError?.(error as Error);
          this.delayMs = Math.min(RECONNECT_MAX_MS, this.delayMs * 2);
          // connect() failed before the client was kept: retry with a placeholder so the guard above lets it through.
          const placeholder = new pg.Client();
          this.client = placeholder;
          this.scheduleReconnect(placeholder);
        },
      );
    }, this.delayMs);
  }

  /** Stops listening and closes the connection. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}

/** The LISTEN connections a store opened, on its jobs' and its schedules' channels, all stopped when it closes. */
export class StoreListeners {
  private readonly listeners = new Set<NotificationListener>();

  constructor(
    private readonly options: {
      settings: ConnectionSettings;
      /** The NOTIFY channel of this schema's jobs. */
      jobsChannel: string;
      /** The NOTIFY channel of this schema's schedules (sql/schedules.ts, SCHEDULE_NOTIFY). */
      schedulesChannel: string;
      onError: ((error: Error) => void) | undefined;
      /** Whether a server process is one of this process's pool connections (`PgConnection.ownsBackend`). */
      ownsBackend: (pid: number) => boolean;
    },
  ) {}

  /**
   * Listens on the jobs' channel: a job claimable from a time (`onAvailable`, with `now()` when the time is not said or
   * notifications may have been missed), a running job cancelled (`onAbort`). A job made claimable by this process's
   * own pool is not passed on: whatever made it (an enqueue, a retry, a resume) has told this process's notifier
   * already, and the echo, arriving a round trip later, would make a node that enqueues claim twice for each batch
   * (docs/postgres.md, "Notifications").
   */
  jobs(params: {
    onAvailable: (runAt: number) => void;
    onAbort: ((jobId: string) => void) | undefined;
    now: () => number;
  }): Promise<() => Promise<void>> {
    const { onAvailable, onAbort, now } = params;
    return this.listen({
      channel: this.options.jobsChannel,
      onNotify: (payload, sender) => {
        // A running job cancelled (jobCancelRunningSql): the node delivering it aborts the exchange.
        if (payload?.startsWith("abort:")) {
          onAbort?.(payload.slice("abort:".length));
          return;
        }
        if (this.options.ownsBackend(sender)) return;
        const runAt = Number(payload);
        onAvailable(Number.isFinite(runAt) ? runAt : now());
      },
      onReconnect: () => onAvailable(now()),
    });
  }

  /**
   * Listens on the schedules' channel, with a connection of its own: schedules change seldom, and a node that has not
   * heard of a change fires nothing wrong meanwhile (a tick is checked against the schedule's revision), only late.
   */
  schedules(onChange: () => void): Promise<() => Promise<void>> {
    return this.listen({ channel: this.options.schedulesChannel, onNotify: () => onChange(), onReconnect: onChange });
  }

  /** Opens a LISTEN connection on `channel`; resolves to the function that closes it. */
  private async listen(options: {
    channel: string;
    onNotify: (payload: string | undefined, sender: number) => void;
    onReconnect: () => void;
  }): Promise<() => Promise<void>> {
    const { settings, onError } = this.options;
    const listener = new NotificationListener({
      url: settings.url,
      applicationName: `${settings.applicationName}-listener`,
      connectionOptions: settings.options,
      ...options,
      ...(onError ? { onError } : {}),
    });
    try {
      await listener.start();
    } catch (error) {
      throw mapError(error);
    }
    this.listeners.add(listener);
    return async () => {
      this.listeners.delete(listener);
      await listener.stop();
    };
  }

  /** Stops every connection still listening. */
  async stopAll(): Promise<void> {
    await Promise.all([...this.listeners].map((listener) => listener.stop()));
    this.listeners.clear();
  }
}

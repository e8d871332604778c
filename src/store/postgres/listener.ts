/**
 * One LISTEN connection per node for `opqueue_jobs:<schema>` notifications (sent by `opqueue_notify`, once per
 * insert batch or admin retry). It lives outside the pool, reconnects by itself with backoff when the connection
 * drops (database restart, `pg_terminate_backend`), and after reconnecting calls back once, since notifications
 * sent while it was away are lost and a missed one must not leave a due job waiting for the poll.
 */
import pg from "pg";

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
      onNotify: (payload: string | undefined) => void;
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
      if (message.channel === this.options.channel) this.options.onNotify(message.payload);
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

/**
 * The live line: one line per scenario on stderr, rewritten in place (`\r`) as the scenario goes, then closed with
 * a newline when the scenario ends. When stderr is not a terminal, updates are throttled to one a second so a log
 * file stays readable.
 */
const started = performance.now();

function elapsed(): string {
  const seconds = Math.round((performance.now() - started) / 1000);
  return `${Math.floor(seconds / 60)}:${String(seconds % 60).padStart(2, "0")}`;
}

/** A bar of `width` characters, `fraction` full. */
export function bar(fraction: number, width = 20): string {
  const full = Math.max(0, Math.min(width, Math.round(fraction * width)));
  return `[${"#".repeat(full)}${".".repeat(width - full)}]`;
}

/** The live line of one scenario. */
export class Progress {
  private lastWrite = 0;
  private lastText = "";
  private readonly tty = process.stderr.isTTY === true;

  constructor(private readonly label: string) {
    this.update("starting");
  }

  /** Rewrites the line (throttled). */
  update(text: string, force = false): void {
    this.lastText = text;
    const now = performance.now();
    if (!force && now - this.lastWrite < (this.tty ? 100 : 1000)) return;
    this.lastWrite = now;
    const columns = process.stderr.columns ?? 160;
    const line = `${elapsed()} ${this.label}: ${text}`.slice(0, columns - 1);
    process.stderr.write(this.tty ? `\r\x1b[K${line}` : `${line}\n`);
  }

  /** Ends the line with a final text. */
  done(text = this.lastText): void {
    this.update(text, true);
    if (this.tty) process.stderr.write("\n");
  }
}

/**
 * A pino logger whose lines a test reads back: each line parsed into `lines` as it is written.
 */
import { Writable } from "node:stream";
import { pino, type Logger } from "pino";

/** A logger at `level` (info by default) and the lines it has written, parsed. */
export function capturedLogger(level: pino.LevelWithSilent = "info"): {
  logger: Logger;
  lines: Array<Record<string, unknown>>;
} {
  const lines: Array<Record<string, unknown>> = [];
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString("utf8").split("\n"))
        if (line.trim() !== "") lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: pino({ level }, sink), lines };
}

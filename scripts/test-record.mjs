// A reporter for node's test runner that writes one JSON line per finished test case (not per suite or file):
// {file, line, name, engine, ok, ms, error}. scripts/run-tests.mjs reads the lines back to print, at the very end of
// a run, the cases that failed on either engine and the slowest ones, where a CI log's tail shows them.
export default async function* record(source) {
  const engine = process.env.OPQUEUE_TEST_ENGINE ?? "sqlite";
  for await (const event of source) {
    if (event.type !== "test:pass" && event.type !== "test:fail") continue;
    const { data } = event;
    if (data.details?.type === "suite" || data.file === undefined) continue;
    const error = data.details?.error;
    // A file's own entry: kept only when the file itself failed (it did not load, or threw outside its cases).
    const fileEntry = data.nesting === 0 && data.name.endsWith(".test.ts");
    if (fileEntry && (event.type === "test:pass" || error?.failureType === "subtestsFailed")) continue;
    const cause = error?.cause ?? error;
    yield `${JSON.stringify({
      file: data.file,
      line: data.line,
      name: data.name,
      engine,
      ok: event.type === "test:pass" && !data.skip,
      skipped: Boolean(data.skip || data.todo),
      ms: Math.round(data.details?.duration_ms ?? 0),
      error: event.type === "test:fail" ? String(cause?.message ?? cause ?? "failed").slice(0, 2000) : undefined,
    })}\n`;
  }
}

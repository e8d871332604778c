import Database from "better-sqlite3";
const db = new Database(process.argv[2]);
const now = Date.now() + 1e9;
const queries = JSON.parse(process.argv[3]);
for (const [name, sql] of Object.entries(queries)) {
  const st = db.prepare(sql);
  const params = {};
  if (sql.includes(":now")) params.now = now;
  if (sql.includes(":closed")) params.closed = "[]";
  if (sql.includes(":limit")) params.limit = 128;
  if (sql.includes(":offset")) params.offset = 0;
  for (let i = 0; i < 200; i++) st.all(params);
  const t = process.hrtime.bigint();
  const N = 2000;
  let rows = 0;
  for (let i = 0; i < N; i++) rows += st.all(params).length;
  const us = Number(process.hrtime.bigint() - t) / 1000 / rows;
  console.log(name.padEnd(28), us.toFixed(3), "us/row");
  console.log("   ", db.prepare("EXPLAIN QUERY PLAN " + sql).all(params).map((r) => r.detail).join(" | "));
}

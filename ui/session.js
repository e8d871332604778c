// Who is signed in, as GET /admin/me answered at sign-in: the views ask what the role may do and show only that
// (docs/api.md, "Roles"). The service decides every request all the same; hiding a button is a courtesy, not a guard.

const RANKS = { viewer: 0, operator: 1, admin: 2 };

let current = { sub: "", role: "viewer", operations: null, jti: null, expires_at: null };

/** Keeps the answer of GET /admin/me. */
export function setSession(me) {
  current = me;
}

/** The answer of GET /admin/me kept at sign-in. */
export function session() {
  return current;
}

/**
 * Whether the role may act on jobs and flow control: with `operationId`, on that operation's (an operator limited by
 * `ops` only on its operations); without, on what no one operation bounds (a chain, a concurrency key, a bulk action
 * without an operation), which such an operator may not.
 */
export function canOperate(operationId) {
  if (RANKS[current.role] < RANKS.operator) return false;
  if (current.operations === null) return true;
  return operationId !== undefined && operationId !== "" && current.operations.includes(operationId);
}

/** Whether the role may do everything: create, change and delete schedules. */
export function canAdminister() {
  return current.role === "admin";
}

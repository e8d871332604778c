/**
 * The benchmark's auth keys, and a fast HS256 minter for enqueue assertions (node:crypto), used where a fresh
 * assertion is sent with every request: the load generator and the latency probe mint them as they go, as a
 * product does when each of its requests enqueues a job. Each assertion names its own chain (`rid`).
 */
import { createHmac } from "node:crypto";

/** `auth` of every generated opqueue config. */
export const AUTH = {
  audience: "opqueue",
  keys: [{ kid: "k1", alg: "HS256" as const, secret: "bench-secret-that-is-at-least-32-bytes-long" }],
  delivery_key: { kid: "q1", alg: "HS256" as const, secret: "bench-delivery-secret-32-bytes-or-more" },
};

/** What a minter needs; plain data, so it can be sent to a child process. */
export interface MintSpec {
  /** Chain ids are `${ridPrefix}-${n}`. */
  ridPrefix: string;
  /** Subjects rotate over `user-0` … `user-{users-1}`. */
  users: number;
}

const base64url = (value: string) => Buffer.from(value).toString("base64url");

/** A function minting the `n`th assertion (valid 300 s from now) for `createUser`. */
export function assertionMinter(spec: MintSpec): (n: number) => string {
  const key = AUTH.keys[0];
  if (!key) throw new Error("no key");
  const header = base64url(JSON.stringify({ alg: "HS256", kid: key.kid, typ: "JWT" }));
  return (n: number) => {
    const iat = Math.floor(Date.now() / 1000);
    const payload = base64url(
      JSON.stringify({
        aud: AUTH.audience,
        iat,
        exp: iat + 300,
        sub: `user-${n % spec.users}`,
        op: "createUser",
        rid: `${spec.ridPrefix}-${n}`,
      }),
    );
    const signature = createHmac("sha256", key.secret).update(`${header}.${payload}`).digest("base64url");
    return `${header}.${payload}.${signature}`;
  };
}

/**
 * A store whose payloads are encrypted before they reach the engine and decrypted as they come back
 * (docs/encryption.md), so both engines, their files and their backups hold only ciphertext of them. It wraps any
 * `Store`: every argument on its way in has each job's or schedule's `request`, each result's `error_body` and stored
 * `body`, and a heartbeat's progress (`progressJson`) sealed; every answer on its way out has them opened, wherever
 * they sit (a row, a list, an outcome, a map of attempts, whose `errorBody` is opened too, a job's asynchronous state,
 * whose progress `value` is). What stays in clear is listed in docs/encryption.md.
 */
import { mapResultPayloads, PayloadCipher } from "./payload-cipher.js";
import type { Store } from "./store.js";

/** Keys whose values are opened on the way out, whatever object holds them. */
const OPENED = new Set(["request", "error_body", "errorBody", "body"]);

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

/**
 * The requests one call sealed, by their sealed text, with the JSON they hold. An insert's answer holds the request it
 * was given: it is read back from here, not decrypted again (about a third of an encrypted enqueue's cipher work).
 */
type SealedRequests = Map<string, string>;

/** `value` with its payloads sealed; what holds none is returned as it is, never changed in place. */
function sealAll(value: unknown, cipher: PayloadCipher, requests: SealedRequests): unknown {
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    value.forEach((item, i) => {
      const sealed = sealAll(item, cipher, requests);
      if (sealed !== item) (copy ??= [...value])[i] = sealed;
    });
    return copy ?? value;
  }
  if (!isPlainObject(value)) return value;
  let copy: Record<string, unknown> | undefined;
  for (const [key, item] of Object.entries(value)) {
    let sealed: unknown;
    if (key === "request" && isPlainObject(item)) {
      const json = JSON.stringify(item);
      sealed = cipher.sealText(json);
      requests.set(sealed as string, json);
    } else if (key === "result" && isPlainObject(item))
      sealed = mapResultPayloads(item, (payload) => cipher.seal(payload));
    // A heartbeat's progress comes as JSON text, and is stored as JSON: the sealed value as a JSON string.
    else if (key === "progressJson" && typeof item === "string") sealed = JSON.stringify(cipher.seal(JSON.parse(item)));
    else sealed = sealAll(item, cipher, requests);
    if (sealed !== item) (copy ??= { ...value })[key] = sealed;
  }
  return copy ?? value;
}

/** Opens every sealed payload of an answer, in place: answers are the store's fresh objects, the caller's to keep. */
function openAll(value: unknown, cipher: PayloadCipher, requests: SealedRequests): void {
  if (Array.isArray(value)) {
    for (const item of value) openAll(item, cipher, requests);
    return;
  }
  if (value instanceof Map) {
    for (const item of value.values()) openAll(item, cipher, requests);
    return;
  }
  if (!isPlainObject(value)) return;
  for (const [key, item] of Object.entries(value)) {
    if (OPENED.has(key) && PayloadCipher.isSealed(item)) {
      const json = requests.get(item);
      value[key] = json === undefined ? cipher.open(item) : (JSON.parse(json) as unknown);
    } else if (key === "progress" && isPlainObject(item) && PayloadCipher.isSealed(item["value"]))
      item["value"] = cipher.open(item["value"]);
    else if (typeof item === "object" && item !== null) openAll(item, cipher, requests);
  }
}

/** `store` with its payloads encrypted at rest by `cipher`. */
export function encryptingStore<S extends Store>(store: S, cipher: PayloadCipher): S {
  // Each method wrapped once, and again if the store's own method is replaced (as tests replace one to fail it).
  const wrapped = new Map<PropertyKey, { original: unknown; method: unknown }>();
  return new Proxy(store, {
    get(target, property) {
      const member = Reflect.get(target, property, target) as unknown;
      if (typeof member !== "function") return member;
      const known = wrapped.get(property);
      let method = known?.original === member ? known.method : undefined;
      if (method === undefined) {
        const original = member as (...args: unknown[]) => unknown;
        method = (...args: unknown[]): unknown => {
          const requests: SealedRequests = new Map();
          const answer = original.apply(
            target,
            args.map((arg) => sealAll(arg, cipher, requests)),
          );
          if (answer instanceof Promise) {
            return answer.then((value: unknown) => {
              openAll(value, cipher, requests);
              return value;
            });
          }
          return answer;
        };
        wrapped.set(property, { original: member, method });
      }
      return method;
    },
  });
}

/**
 * Payloads encrypted at rest (docs/encryption.md): AES-256-GCM with a random 96-bit nonce per value, written as the
 * string `opq1:<key id>:<base64url of nonce, ciphertext and tag>`. The first key encrypts; every key decrypts, found by
 * the id each value carries. A value without the prefix is read as it is: rows written before encryption was turned
 * on stay readable.
 */
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import { ConfigError } from "../config/config-error.js";
import { fromEnv, type ConfigEnv } from "../config/env.js";
import type { Config } from "../config.js";

const PREFIX = "opq1:";
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
/** Nonces drawn from the system's random source at once: a call of `randomBytes` cost about 2 µs, a slice 0.05. */
const NONCES_PER_DRAW = 256;

/** A value that cannot be decrypted: its key is not configured, or it was altered. */
export class PayloadDecryptError extends Error {
  override readonly name = "PayloadDecryptError";
}

/** Encrypts and decrypts JSON values with the configured keys. */
export class PayloadCipher {
  private readonly byId: Map<string, Buffer>;
  /**
   * Random bytes not yet used as nonces, taken 12 at a time from `nonceAt`. Each nonce is as random as one drawn on
   * its own, and is used once: the pool only saves the calls.
   */
  private nonces = Buffer.alloc(0);
  private nonceAt = 0;

  constructor(private readonly keys: ReadonlyArray<{ id: string; key: Buffer }>) {
    if (keys.length === 0) throw new Error("a payload cipher needs a key");
    this.byId = new Map(keys.map(({ id, key }) => [id, key]));
  }

  /** The keys of `encryption.keys`, read from their variables; null when encryption is off. */
  static fromConfig(config: Pick<Config, "encryption">, env: ConfigEnv): PayloadCipher | null {
    if (config.encryption === undefined) return null;
    const seen = new Set<string>();
    const keys = config.encryption.keys.map(({ id, key_env: name }, i) => {
      const where = `encryption.keys.${i}`;
      if (seen.has(id)) throw new ConfigError(`config: ${where}.id: "${id}" is the id of an earlier key too`);
      seen.add(id);
      const text = fromEnv(env, `${where}.key_env`, name).trim();
      const key = Buffer.from(text, "base64");
      if (key.length !== 32 || key.toString("base64").replace(/=+$/, "") !== text.replace(/=+$/, "")) {
        throw new ConfigError(
          `config: ${where}.key_env: ${name} must hold 32 bytes in base64 (openssl rand -base64 32); it holds ` +
            `${key.length} bytes`,
        );
      }
      return { id, key };
    });
    return new PayloadCipher(keys);
  }

  /** The id of the key that encrypts. */
  get currentKeyId(): string {
    return (this.keys[0] as { id: string }).id;
  }

  /** Whether `value` is a value this format wrote (under any key). */
  static isSealed(value: unknown): value is string {
    return typeof value === "string" && value.startsWith(PREFIX);
  }

  /** The id of the key a sealed value was encrypted with. */
  static keyIdOf(sealed: string): string {
    return sealed.slice(PREFIX.length, sealed.indexOf(":", PREFIX.length));
  }

  /** `value` (any JSON value) encrypted with the first key. */
  seal(value: unknown): string {
    return this.sealText(JSON.stringify(value));
  }

  /** The JSON text of a value encrypted with the first key: what `seal` makes of the value. */
  sealText(json: string): string {
    const { id, key } = this.keys[0] as { id: string; key: Buffer };
    const nonce = this.nextNonce();
    const cipher = createCipheriv("aes-256-gcm", key, nonce);
    // The key id is bound to the ciphertext: a value cannot be passed off as another key's.
    cipher.setAAD(Buffer.from(id, "utf8"));
    const data = Buffer.concat([cipher.update(json, "utf8"), cipher.final()]);
    return `${PREFIX}${id}:${Buffer.concat([nonce, data, cipher.getAuthTag()]).toString("base64url")}`;
  }

  private nextNonce(): Buffer {
    if (this.nonceAt + NONCE_BYTES > this.nonces.length) {
      this.nonces = randomBytes(NONCE_BYTES * NONCES_PER_DRAW);
      this.nonceAt = 0;
    }
    this.nonceAt += NONCE_BYTES;
    return this.nonces.subarray(this.nonceAt - NONCE_BYTES, this.nonceAt);
  }

  /** The JSON value `sealed` holds; throws `PayloadDecryptError` when its key is unknown or it was altered. */
  open(sealed: string): unknown {
    const separator = sealed.indexOf(":", PREFIX.length);
    const id = sealed.slice(PREFIX.length, separator);
    const key = this.byId.get(id);
    if (separator < 0 || key === undefined) {
      throw new PayloadDecryptError(
        `a stored payload is encrypted with key "${id.slice(0, 32)}", which encryption.keys lacks`,
      );
    }
    const bytes = Buffer.from(sealed.slice(separator + 1), "base64url");
    if (bytes.length < NONCE_BYTES + TAG_BYTES) throw new PayloadDecryptError("a stored payload is cut short");
    const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, NONCE_BYTES));
    decipher.setAAD(Buffer.from(id, "utf8"));
    decipher.setAuthTag(bytes.subarray(bytes.length - TAG_BYTES));
    let text: string;
    try {
      text = Buffer.concat([
        decipher.update(bytes.subarray(NONCE_BYTES, bytes.length - TAG_BYTES)),
        decipher.final(),
      ]).toString("utf8");
    } catch {
      throw new PayloadDecryptError(`a stored payload encrypted with key "${id}" does not decrypt: it was altered`);
    }
    return JSON.parse(text) as unknown;
  }
}

/**
 * A job's result with each payload it holds passed through `each`: its error body (a string; null holds none) and its
 * stored body (any value but undefined). Its status code and terminal reason are not payloads and stay as they are.
 * The one description of where a result holds payloads: the encrypting store seals them through it, a rewrap pass
 * seals them again.
 */
export function mapResultPayloads(
  result: Record<string, unknown>,
  each: (payload: unknown) => unknown,
): Record<string, unknown> {
  const mapped = { ...result };
  if (typeof result["error_body"] === "string") mapped["error_body"] = each(result["error_body"]);
  if (result["body"] !== undefined) mapped["body"] = each(result["body"]);
  return mapped;
}

/**
 * Turns configured key material into jose keys, once, at start-up.
 *
 * A key that cannot be imported (a PEM of the wrong kind, a P-256 key declared EdDSA, ...) is a
 * configuration problem, so it surfaces as a `ConfigError` naming the key, before any token is seen.
 */
import { createPublicKey } from "node:crypto";
import { importPKCS8, importSPKI, type CryptoKey, type JWK } from "jose";
import { ConfigError, type DeliveryKeyConfig, type VerifyKeyConfig } from "../config.js";

/** The signature algorithms a configured key may carry. */
export type KeyAlgorithm = VerifyKeyConfig["alg"] | DeliveryKeyConfig["alg"];

/** A key ready for jose: its `kid`, the one algorithm it accepts, and the key material. */
export interface ImportedKey {
  kid: string;
  alg: KeyAlgorithm;
  key: CryptoKey | Uint8Array;
}

const encoder = new TextEncoder();

/** The bytes of an HS256 secret: its UTF-8 encoding, as docs/tokens.md and every client library expect. */
export function secretBytes(secret: string): Uint8Array {
  return encoder.encode(secret);
}

function required(value: string | undefined, where: string, field: string, alg: string): string {
  if (value === undefined || value === "") {
    throw new ConfigError(`config: ${where}: ${field} is required for alg ${alg}`);
  }
  return value;
}

function importFailure(where: string, field: string, alg: string, error: unknown): ConfigError {
  const reason = error instanceof Error ? error.message : String(error);
  return new ConfigError(`config: ${where}.${field}: cannot import it as a ${alg} key: ${reason}`);
}

/** Imports one key of `auth.keys` (HS256 secret or SPKI public key); `where` names it in errors. */
export async function importVerifyKey(config: VerifyKeyConfig, where: string): Promise<ImportedKey> {
  if (config.alg === "HS256") {
    return { kid: config.kid, alg: config.alg, key: secretBytes(required(config.secret, where, "secret", config.alg)) };
  }
  const pem = required(config.public_key, where, "public_key", config.alg);
  try {
    return { kid: config.kid, alg: config.alg, key: await importSPKI(pem, config.alg) };
  } catch (error) {
    throw importFailure(where, "public_key", config.alg, error);
  }
}

/** A key of `auth.delivery_key`, imported: the key that signs with it, and the public JWK of an asymmetric one. */
export interface ImportedDeliveryKey {
  signing: ImportedKey;
  /** What the JWKS endpoint serves for it (without kid, alg and use); null for HS256, which has no public half. */
  publicJwk: JWK | null;
}

/**
 * Imports one key of `auth.delivery_key` (`where` names it in errors); for an asymmetric key also derives the public
 * JWK that the JWKS endpoint serves.
 */
export async function importDeliveryKey(config: DeliveryKeyConfig, where: string): Promise<ImportedDeliveryKey> {
  if (config.alg === "HS256") {
    const key = secretBytes(required(config.secret, where, "secret", config.alg));
    return { signing: { kid: config.kid, alg: config.alg, key }, publicJwk: null };
  }
  const pem = required(config.private_key, where, "private_key", config.alg);
  try {
    const key = await importPKCS8(pem, config.alg);
    // Derived from the PEM by node:crypto so the private key itself can stay non-extractable.
    const publicJwk = createPublicKey(pem).export({ format: "jwk" }) as JWK;
    return { signing: { kid: config.kid, alg: config.alg, key }, publicJwk };
  } catch (error) {
    throw importFailure(where, "private_key", config.alg, error);
  }
}

// API keys as the gateway keeps them: never the key itself, only its SHA-256 (written
// `sha256:<64 lowercase hex>` in the config file), and keys read from a secret file or the
// environment are hashed as they are read. A presented key is hashed once and compared with every
// known hash in constant time (no early exit), so neither timing nor a map lookup tells how close
// a guess came.
import { hash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";

/** Shortest and longest key accepted (a short key is guessable; a long one is a pasted blob). */
export const MIN_KEY_CHARS = 16;
export const MAX_KEY_CHARS = 256;

export function hashKey(key: string): string {
  return `sha256:${hash("sha256", key, "hex")}`;
}

/** Why a key is unusable (control characters, length), or null when it is fine. */
export function keyProblem(key: string): string | null {
  if (/[^\x21-\x7e]/.test(key))
    return "holds a control character, a space or a non-ASCII character (keys are printable ASCII)";
  if (key.length < MIN_KEY_CHARS) return `is shorter than ${MIN_KEY_CHARS} characters`;
  if (key.length > MAX_KEY_CHARS) return `is longer than ${MAX_KEY_CHARS} characters`;
  return null;
}

export class SecretError extends Error {
  override name = "SecretError";
}

/** Non-empty lines of a secret file (one key a line; the trailing newline editors add is dropped). */
export function readSecretLines(path: string, field: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new SecretError(`${field}: cannot read ${path}: ${(e as Error).message}`);
  }
  return text.split(/\r?\n/).filter((l) => l !== "");
}

/** One secret: the environment variable when set, else the file's first line, else undefined. */
export function readSecret(
  env: NodeJS.ProcessEnv,
  envName: string | undefined,
  file: string | undefined,
  field: string,
): string | undefined {
  if (envName) {
    const v = env[envName];
    if (v !== undefined && v !== "") return v;
  }
  if (file) {
    const lines = readSecretLines(file, `${field}File`);
    if (lines.length === 0) throw new SecretError(`${field}File: ${file} is empty`);
    return lines[0];
  }
  return undefined;
}

/** Keys a table remembers as verified (the most recent; an older one is hashed again). */
const VERIFIED_KEYS = 1024;

/**
 * A table of key hashes, each naming who it belongs to; lookups compare every entry. A key found
 * is remembered, so a client's every request does not hash it again (a table is never changed:
 * a reloaded config builds a new one). A key not found is never remembered: a stranger cannot
 * fill the memory, and pays the hash each time.
 */
export class KeyTable<T> {
  private readonly entries: { digest: Buffer; owner: T }[] = [];
  private readonly verified = new Map<string, T>();

  add(hash: string, owner: T): void {
    this.entries.push({ digest: Buffer.from(hash.slice("sha256:".length), "hex"), owner });
  }

  get size(): number {
    return this.entries.length;
  }

  lookup(key: string): T | null {
    const known = this.verified.get(key);
    if (known !== undefined) return known;
    const digest = hash("sha256", key, "buffer");
    let found: T | null = null;
    for (const e of this.entries)
      if (timingSafeEqual(e.digest, digest) && found === null) found = e.owner;
    if (found !== null) {
      if (this.verified.size >= VERIFIED_KEYS)
        this.verified.delete(this.verified.keys().next().value as string);
      this.verified.set(key, found);
    }
    return found;
  }
}

// The keys of an `auth` section, resolved once at start: hashes from the file, plaintext keys from
// secret files and the environment (checked, then hashed). A key named twice, anywhere, is an
// error naming both places: one key must mean one principal.
import type { AuthConfig, TenantConfig } from "./config.js";
import { hashKey, KeyTable, keyProblem, readSecretLines, SecretError } from "./keys.js";

/** Who a request is: a tenant (its sessions are its own) and whether it holds the admin key. */
export interface Principal {
  tenant: string | null;
  admin: boolean;
}

/** With auth off every request is this: no tenant, allowed everything (the gateway as it was). */
export const OPEN_PRINCIPAL: Principal = Object.freeze({ tenant: null, admin: true });
/** A request without a key where the route does not need one (no client key configured). */
export const ANONYMOUS: Principal = Object.freeze({ tenant: null, admin: false });
export const ADMIN: Principal = Object.freeze({ tenant: null, admin: true });

export interface ResolvedAuth {
  keys: KeyTable<Principal>;
  /** Whether any client key is configured (then inference needs one). */
  clientKeys: boolean;
  tenants: Map<string, TenantConfig>;
  maxHeaderBytes: number;
}

export class AuthConfigError extends Error {
  override name = "AuthConfigError";
}

interface Sources {
  keys: string[];
  keyFile?: string;
  keyEnv?: string;
}

/** Every key hash of one key holder, each with the field it came from. */
function hashesOf(
  s: Sources,
  field: string,
  env: NodeJS.ProcessEnv,
): { hash: string; field: string }[] {
  const out = s.keys.map((h, i) => ({ hash: h, field: `${field}.keys.${i}` }));
  const plain = (key: string, where: string) => {
    const problem = keyProblem(key);
    if (problem) throw new AuthConfigError(`${where}: the key ${problem}`);
    out.push({ hash: hashKey(key), field: where });
  };
  if (s.keyFile) {
    let lines: string[];
    try {
      lines = readSecretLines(s.keyFile, `${field}.keyFile`);
    } catch (e) {
      if (e instanceof SecretError) throw new AuthConfigError(e.message);
      throw e;
    }
    for (const [i, k] of lines.entries()) plain(k, `${field}.keyFile (${s.keyFile} line ${i + 1})`);
  }
  if (s.keyEnv) {
    const v = env[s.keyEnv];
    if (v === undefined || v === "")
      throw new AuthConfigError(`${field}.keyEnv: environment variable ${s.keyEnv} is not set`);
    plain(v, `${field}.keyEnv (${s.keyEnv})`);
  }
  return out;
}

export function resolveAuth(
  config: AuthConfig,
  env: NodeJS.ProcessEnv = process.env,
): ResolvedAuth {
  const keys = new KeyTable<Principal>();
  const seen = new Map<string, string>();
  const add = (list: { hash: string; field: string }[], who: Principal) => {
    for (const { hash, field } of list) {
      const first = seen.get(hash);
      if (first) throw new AuthConfigError(`${field}: duplicate key (the same key as ${first})`);
      seen.set(hash, field);
      keys.add(hash, who);
    }
  };
  add(hashesOf(config.admin, "auth.admin", env), ADMIN);
  const tenants = new Map<string, TenantConfig>();
  config.tenants.forEach((t, i) => {
    if (tenants.has(t.id))
      throw new AuthConfigError(`auth.tenants.${i}.id: duplicate tenant id '${t.id}'`);
    tenants.set(t.id, t);
    const list = hashesOf(t, `auth.tenants.${i}`, env);
    if (list.length === 0)
      throw new AuthConfigError(
        `auth.tenants.${i}: tenant '${t.id}' has no key (keys, keyFile or keyEnv)`,
      );
    add(list, Object.freeze({ tenant: t.id, admin: false }));
  });
  if (keys.size === 0)
    throw new AuthConfigError(
      "auth: no key configured (auth.admin or auth.tenants); leave the section out to run without authentication",
    );
  return { keys, clientKeys: tenants.size > 0, tenants, maxHeaderBytes: config.maxHeaderBytes };
}

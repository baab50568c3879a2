// Tenants isolated in the worker's cache itself. A `salted` tenant's requests carry a cache
// namespace of their own: the gateway sets SGLang's `cache_salt` (it namespaces the radix tree,
// HiCache storage and the KV events' block hashes), and the turn's hash namespace takes the same
// value, so routing, the index and pins see the blocks the worker stores. A prefix is then reused
// only within its tenant: no other tenant's request can hit it, and `cached_tokens` tells nobody
// what another tenant sent. `shared`: one cache for all, the most reuse (a system prompt cached
// once for every tenant) and the least isolation.
import { withFieldBytes } from "../core/json-splice.js";
import type { TurnRequest } from "../request/shapes.js";
import type { TenantConfig } from "./config.js";

export type CacheIsolation = "shared" | "salted";

/** The tenant's isolation: as configured, else salted whenever more than one tenant is. */
export function isolationOf(t: TenantConfig, tenants: number): CacheIsolation {
  return t.cacheIsolation ?? (tenants > 1 ? "salted" : "shared");
}

/**
 * The worker's cache namespace for a tenant's request (the client's own salt, if any, kept within
 * it). Tenant ids have no `/`, so no tenant's salt, whatever its client sends, is another's.
 */
export function tenantSalt(tenant: string, clientSalt: string | null): string {
  return clientSalt === null ? `kvctl/${tenant}` : `kvctl/${tenant}/${clientSalt}`;
}

/** Routes whose worker request takes `cache_salt` (SGLang 0.5.23's /v1/messages has no such field). */
const SALTABLE = new Set(["chat", "completions", "generate"]);

/**
 * A request body for the worker in the tenant's namespace, with the salt it carries; null when the
 * tenant shares the cache. A `cache_salt` the client sent is replaced: it is appended after it,
 * and SGLang reads the last of a key given twice.
 */
export function saltedBody(
  raw: Buffer,
  clientSalt: string | null,
  t: TenantConfig | undefined,
  tenants: number,
): { raw: Buffer; salt: string } | null {
  if (!t || isolationOf(t, tenants) !== "salted") return null;
  const salt = tenantSalt(t.id, clientSalt);
  return { raw: withFieldBytes(raw, Buffer.from(`"cache_salt":${JSON.stringify(salt)}`)), salt };
}

/**
 * Puts a salted tenant's turn in its namespace: the body sent to the worker and the turn's hash
 * namespace take the same salt. Returns why it cannot be (a route with no cache namespace), or null.
 */
export function isolate(
  turn: TurnRequest,
  t: TenantConfig | undefined,
  tenants: number,
): string | null {
  const s = saltedBody(turn.upstreamBody, turn.namespace.cacheSalt, t, tenants);
  if (s === null) return null;
  if (!SALTABLE.has(turn.route))
    return (
      `tenant '${t?.id}' is isolated (cacheIsolation: salted) and this route cannot carry a ` +
      "cache namespace to the worker; use /v1/chat/completions, or set cacheIsolation: shared"
    );
  turn.upstreamBody = s.raw;
  turn.namespace = { ...turn.namespace, cacheSalt: s.salt };
  return null;
}

// The `auth` section of the gateway config and the credential fields of a worker entry. Key
// hashes live in the file; plaintext keys only in secret files or the environment (named here,
// read when the gateway starts: see table.ts).
import { z } from "zod";

/** A key as the config file holds it: its SHA-256 (hashKey in keys.ts), never the key. */
const KEY_HASH = /^sha256:[0-9a-f]{64}$/;
const KEY_HASH_HINT =
  "must be 'sha256:' and 64 lowercase hex digits, the SHA-256 of the key " +
  '(a plaintext key is never stored: printf %s "$KEY" | sha256sum)';

const keyHash = z.string().regex(KEY_HASH, KEY_HASH_HINT);
const envName = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name");
const positive = z.number().min(0, "must be >= 0");
const positiveInt = z.number().int("must be an integer").min(1, "must be >= 1");
const tenantId = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,64}$/, "must be 1-64 characters from A-Z a-z 0-9 _ -");

/** Where keys come from: hashes in the file, plaintext keys in a secret file (one a line) or an env variable. */
const keySources = {
  keys: z.array(keyHash).default([]),
  keyFile: z.string().min(1).optional(),
  keyEnv: envName.optional(),
};

export const tenantConfigSchema = z.strictObject({
  id: tenantId,
  ...keySources,
  /** Blocks the tenant's sessions may hold pinned at once, all together (absent: no cap). */
  maxPinnedBlocks: z.number().int().min(0).optional(),
  /** Blocks one session may hold pinned at once (absent: no cap). */
  maxPinnedBlocksPerSession: z.number().int().min(0).optional(),
  /** Requests per second (token bucket refill; absent: no rate limit). */
  requestsPerSecond: positive.optional(),
  /** Bucket size: requests admitted at once after an idle spell (default: one second's worth, at least 1). */
  burst: positiveInt.optional(),
  /** Requests in flight at once (absent: no limit). */
  maxConcurrent: positiveInt.optional(),
  /** salted: the tenant's prefixes are cached in a namespace of its own (absent: salted when more
   * than one tenant is configured, else shared). */
  cacheIsolation: z.enum(["shared", "salted"]).optional(),
});

export const authConfigSchema = z.strictObject({
  /** The admin key(s): /metrics, any session's hints, the admin routes, and whatever a client key may do. */
  admin: z.strictObject(keySources).default({ keys: [] }),
  tenants: z.array(tenantConfigSchema).default([]),
  /** Longest Authorization / x-api-key header accepted (bytes); longer is refused 431. */
  maxHeaderBytes: positiveInt.default(1024),
});

/** A worker's credentials: sent on every call the gateway makes to it. */
export const workerCredentialFields = {
  /** SGLang's --api-key (inference and its own routes); the secret itself, prefer apiKeyFile/apiKeyEnv. */
  apiKey: z.string().min(1).optional(),
  apiKeyFile: z.string().min(1).optional(),
  apiKeyEnv: envName.optional(),
  /** SGLang's --admin-api-key, sent instead of apiKey on the worker's kvctl routes (/hicache/*, /session/*). */
  adminApiKey: z.string().min(1).optional(),
  adminApiKeyFile: z.string().min(1).optional(),
  adminApiKeyEnv: envName.optional(),
};

export type AuthConfig = z.output<typeof authConfigSchema>;
export type TenantConfig = z.output<typeof tenantConfigSchema>;

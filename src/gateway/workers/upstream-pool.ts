// One pooled HTTP client per worker (undici), carrying the keys the gateway sends that worker.
import { Pool } from "undici";
import { CredentialPool, type WorkerCredentials } from "../auth/upstream-credentials.js";

export interface UpstreamOptions {
  connections: number;
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
}

export function createUpstreamPool(
  url: string,
  o: UpstreamOptions,
  credentials: WorkerCredentials | null = null,
): Pool {
  const options: Pool.Options = {
    connections: o.connections,
    pipelining: 1,
    connect: { timeout: o.connectTimeoutMs },
    headersTimeout: o.headersTimeoutMs,
    bodyTimeout: o.bodyTimeoutMs,
    // Below the 5 s SGLang's HTTP server keeps an idle connection (SGLANG_TIMEOUT_KEEP_ALIVE): a
    // connection the worker is about to close is not picked for a request.
    keepAliveTimeout: 4_000,
  };
  return credentials?.stripClientKey
    ? new CredentialPool(url, options, credentials)
    : new Pool(url, options);
}

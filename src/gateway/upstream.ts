// One pooled HTTP client per worker (undici), and how its failures are told apart: a timeout, a
// refused or reset connection (the worker is gone: drain it), or an HTTP error answer (the worker
// is fine, the request was not).
import { Pool, errors as undiciErrors } from "undici";
import { CredentialPool, type WorkerCredentials } from "./auth/upstream-credentials.js";

export type UpstreamFailure = "timeout" | "connect" | "reset" | "aborted" | "other";

export function classifyUpstreamError(err: unknown): UpstreamFailure {
  const e = err as { code?: string; name?: string; cause?: { code?: string } };
  const code = e?.code ?? e?.cause?.code;
  if (
    err instanceof undiciErrors.HeadersTimeoutError ||
    err instanceof undiciErrors.BodyTimeoutError ||
    err instanceof undiciErrors.ConnectTimeoutError
  )
    return "timeout";
  if (err instanceof undiciErrors.RequestAbortedError || e?.name === "AbortError") return "aborted";
  if (
    code === "ECONNREFUSED" ||
    code === "ENOTFOUND" ||
    code === "EHOSTUNREACH" ||
    code === "ENETUNREACH"
  )
    return "connect";
  if (
    code === "ECONNRESET" ||
    code === "EPIPE" ||
    code === "UND_ERR_SOCKET" ||
    err instanceof undiciErrors.SocketError
  )
    return "reset";
  return "other";
}

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

/** A small JSON call to a worker (server_info, tokenize, health) with its own deadline. */
export async function callJson(
  pool: Pool,
  method: "GET" | "POST",
  path: string,
  body: unknown,
  timeoutMs: number,
): Promise<{ status: number; json: unknown; text: string }> {
  const res = await pool.request({
    method,
    path,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.body.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.statusCode, json, text };
}

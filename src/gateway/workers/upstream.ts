// A call on a worker's pooled HTTP client (upstream-pool.ts), and how its failures are told
// apart: a timeout, a refused or reset connection (the worker is gone: drain it), or an HTTP error
// answer (the worker is fine, the request was not).
import { type Pool, errors as undiciErrors } from "undici";

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

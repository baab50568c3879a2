// How long the gateway waits on a worker, per kind of call. A non-streamed generation sends its
// headers with its last byte, so a deadline on the headers would cut a generation the worker is
// still working on: that call waits upstreamResponseTimeoutMs (none by default) instead, and a
// worker that stops working is caught by the health checks, which drain it and end its calls.
// Streamed calls and calls that generate nothing (models, tokenize, count_tokens) get their
// headers at once: upstreamHeadersTimeoutMs bounds them. Between two chunks of any answer:
// upstreamIdleTimeoutMs. Opening the connection: upstreamConnectTimeoutMs (the pool's).
import type { LimitsConfig } from "../config/limits.js";

export interface CallTimeouts {
  /** undici's headersTimeout (0: none). */
  headersTimeout: number;
  /** undici's bodyTimeout: the longest silence between two body chunks. */
  bodyTimeout: number;
}

/** The deadlines of one worker call; nonStreamedGeneration: it runs the model and is not streamed. */
export function callTimeouts(limits: LimitsConfig, nonStreamedGeneration: boolean): CallTimeouts {
  return {
    headersTimeout: nonStreamedGeneration
      ? limits.upstreamResponseTimeoutMs
      : limits.upstreamHeadersTimeoutMs,
    bodyTimeout: limits.upstreamIdleTimeoutMs,
  };
}

/** Headers on a timeout answer: the SDKs (OpenAI's, Anthropic's) do not retry it into a second generation. */
export const NO_RETRY_HEADERS: Readonly<Record<string, string>> = { "x-should-retry": "false" };

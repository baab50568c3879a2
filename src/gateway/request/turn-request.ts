// The front door of a turn: parseTurn reads an inference request once (its bytes, JSON body and
// headers) into the TurnRequest every later step works from, and validates it there, with errors
// naming the field. Nothing after it reads the body again: what the turn, its worker call and its
// record need (session id, namespace, prompt token ids or the call that fetches them, the parts
// of the prompt the record measures, the prompt-cache markers) is taken out here.
import type { IncomingHttpHeaders } from "node:http";
import type { RouteKind } from "../../contract/observations.js";
import { badJsonMessage } from "../core/errors.js";
import { isObject } from "../core/json-shape.js";
import { SessionIdError, sessionIdOf, type SessionIdSource } from "./session-id.js";
import { HINT_HEADER } from "./hints.js";
import { type MarkerTtls, parseCacheMarkers, prefixTokenizeRequest } from "./markers.js";
import { promptTailOf } from "./prompt-tail.js";
import { contentTypeError, streamOf as workerStreamOf } from "./worker-rules.js";
import { flavorOf } from "./routes.js";
import type { RequestMarkers, TurnRequest } from "./shapes.js";
import { promptTokensInRequest, tokenizeRequestFor, withTokenIds } from "./token-request.js";
import { type TokenizeCall, tokenizeCall } from "./tokenize-call.js";
import type { HashNamespace } from "../workers/worker-scheme.js";

/** A request the gateway refuses before routing: 400, the field named, counted under reason. */
export class TurnRequestError extends Error {
  override name = "TurnRequestError";
  constructor(
    readonly reason:
      | "bad_content_type"
      | "bad_json"
      | "not_object"
      | "bad_field"
      | "bad_session_id",
    message: string,
    readonly field: string | null = null,
  ) {
    super(message);
  }
  /** Whether it counts as a request of its route (malformed JSON or a non-JSON Content-Type, like an oversized body, does not). */
  get ofRoute(): boolean {
    return this.reason !== "bad_json" && this.reason !== "bad_content_type";
  }
}

export interface TurnRules {
  /** TTLs the prompt-cache markers resolve to. */
  markerTtls: MarkerTtls;
}

/** Reads and validates one inference request; throws TurnRequestError naming the problem. */
export function parseTurn(
  route: RouteKind,
  raw: Buffer,
  headers: IncomingHttpHeaders,
  rules: TurnRules,
): TurnRequest {
  const badType = contentTypeError(route, headers["content-type"]);
  if (badType) throw new TurnRequestError("bad_content_type", badType);
  const body = jsonBody(raw);
  const stream = streamOf(route, body);
  const session = sessionOf(headers, body);
  const namespace = namespaceOf(body);
  const splice =
    !stream && (route === "chat" || route === "completions")
      ? withTokenIds(route, raw, body)
      : null;
  return {
    route,
    flavor: flavorOf(route),
    headers,
    raw,
    upstreamBody: splice?.raw ?? raw,
    added: splice?.added ?? null,
    stream,
    session,
    engineSession: body.session_id !== undefined || body.session_params !== undefined,
    model: typeof body.model === "string" ? body.model : null,
    namespace,
    promptTokens: promptTokensInRequest(route, body),
    tokenize: tokenizeRequestFor(route, body),
    systemTokenize: route === "chat" ? systemTokenizeFor(body) : null,
    markers: mayCarryMarkers(raw) ? markersOf(route, body, rules.markerTtls) : null,
    tail: promptTailOf(route, body),
    hintHeader: headerValue(headers[HINT_HEADER]),
    tenant: null,
    admin: true,
  };
}

function jsonBody(raw: Buffer): Record<string, unknown> {
  let json: unknown;
  if (raw.length > 0) {
    try {
      json = JSON.parse(raw.toString("utf8"));
    } catch (e) {
      throw new TurnRequestError("bad_json", badJsonMessage(e));
    }
  }
  if (!isObject(json))
    throw new TurnRequestError("not_object", "request body must be a JSON object");
  return json;
}

function streamOf(route: RouteKind, body: Record<string, unknown>): boolean {
  const stream = workerStreamOf(route, body.stream);
  if (stream !== null) return stream;
  const message =
    route === "generate"
      ? "stream must be a boolean"
      : "stream must be a boolean or a string or number read as one (true/false, 1/0, yes/no, on/off)";
  throw new TurnRequestError("bad_field", message, "stream");
}

function sessionOf(
  headers: IncomingHttpHeaders,
  body: Record<string, unknown>,
): SessionIdSource | null {
  try {
    return sessionIdOf(headers, body);
  } catch (e) {
    if (!(e instanceof SessionIdError)) throw e;
    throw new TurnRequestError("bad_session_id", e.message, e.field);
  }
}

/** The request's hash namespace: `cache_salt` (SGLang seeds the event chain with it) and `extra_key`. */
function namespaceOf(body: Record<string, unknown>): HashNamespace {
  for (const k of ["cache_salt", "extra_key"]) {
    if (body[k] !== undefined && body[k] !== null && typeof body[k] !== "string")
      throw new TurnRequestError("bad_field", `${k} must be a string`, k);
  }
  return {
    cacheSalt:
      typeof body.cache_salt === "string" && body.cache_salt !== "" ? body.cache_salt : null,
    extraKey: typeof body.extra_key === "string" ? body.extra_key : null,
  };
}

// As bytes once: a string needle is encoded again on every search.
const MARKER_NEEDLES = ["cache_control", "prompt_cache_retention", "\\u"].map((n) =>
  Buffer.from(n),
);

/**
 * Whether a request body can hold a prompt-cache marker, from its bytes: a key spelled with JSON
 * escapes (the only way to write "cache_control" other than plainly) sends it the long way.
 */
export function mayCarryMarkers(raw: Buffer): boolean {
  return MARKER_NEEDLES.some((n) => raw.includes(n));
}

function markersOf(
  route: RouteKind,
  body: Record<string, unknown>,
  ttls: MarkerTtls,
): RequestMarkers | null {
  const parsed = parseCacheMarkers(route, body, ttls);
  if (!parsed) return null;
  return {
    errors: parsed.errors,
    marks: parsed.specs.map((spec) => {
      const req = prefixTokenizeRequest(route, body, spec);
      return { spec, prefix: req ? tokenizeCall(req) : null };
    }),
    messageCount: Array.isArray(body.messages) ? body.messages.length : 0,
  };
}

/** The system message (and tools) rendered alone, without a generation prompt. */
function systemTokenizeFor(body: Record<string, unknown>): TokenizeCall | null {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || !isObject(msgs[0]) || msgs[0].role !== "system") return null;
  const req: Record<string, unknown> = { messages: [msgs[0]], add_generation_prompt: false };
  if (body.tools !== undefined) req.tools = body.tools;
  return tokenizeCall(req);
}

function headerValue(v: string | string[] | undefined): string | null {
  const value = Array.isArray(v) ? v.join(",") : v;
  return value === undefined || value.trim() === "" ? null : value;
}

// The shape of a parsed inference request: what parseTurn (turn-request.ts) produces and every
// later step of the turn reads. Types only, built of leaf types, so the turn path can read a
// request without depending on how it was parsed.
import type { IncomingHttpHeaders } from "node:http";
import type { PromptTail, RouteKind } from "../../contract/observations.js";
import type { ApiFlavor } from "../core/errors.js";
import type { HashNamespace } from "../workers/worker-scheme.js";
import type { SessionIdSource } from "./session-id.js";
import type { TokenFieldsAdded, TokenizeCall } from "./tokenize-call.js";

export interface MarkerSpec {
  /** Where the marker was: "tools[2]", "system", "message[3]", "auto", "prompt_cache_retention". */
  at: string;
  ttlSeconds: number;
  /** Messages in the prefix up to the marker (0: tools/system only); null: the whole prompt. */
  messages: number | null;
}

/** A marker with the tokenize call that renders the prompt up to it (null: the whole prompt). */
export interface MarkerPrefix {
  spec: MarkerSpec;
  prefix: TokenizeCall | null;
}

/** The request's prompt-cache markers, each with the call that locates it in the worker's tokens. */
export interface RequestMarkers {
  errors: string[];
  marks: MarkerPrefix[];
  /** Messages in the request (a marker on the last one covers the whole prompt). */
  messageCount: number;
}

export interface TurnRequest {
  route: RouteKind;
  flavor: ApiFlavor;
  headers: IncomingHttpHeaders;
  /** The body's bytes as the client sent them. */
  raw: Buffer;
  /** The bytes sent to the worker: raw, or raw with `return_token_ids` spliced in (added says). */
  upstreamBody: Buffer;
  /** Token-id fields the gateway asked for and cuts from the answer; null when it asked for none. */
  added: TokenFieldsAdded | null;
  stream: boolean;
  session: SessionIdSource | null;
  /** The body names an SGLang session itself (session_id or session_params): the gateway adds none. */
  engineSession: boolean;
  model: string | null;
  namespace: HashNamespace;
  /** Prompt token ids the request carries itself (input_ids, a token-list prompt). */
  promptTokens: number[] | null;
  /** The tokenize call that renders the prompt as the worker will, when it carries no ids. */
  tokenize: TokenizeCall | null;
  /** The call that renders the leading system message (and tools) alone (chat only). */
  systemTokenize: TokenizeCall | null;
  /** Prompt-cache markers; null when the bytes cannot hold one or the body has none. */
  markers: RequestMarkers | null;
  /** The last message of the prompt (chat and messages). */
  tail: PromptTail | null;
  /** The x-kvctl-hint header, when sent. */
  hintHeader: string | null;
  /** The tenant whose key the request came with (its session is that tenant's); null: none or auth off. */
  tenant: string | null;
  /** Whether it came with the admin key, or auth is off (any session is open to it). */
  admin: boolean;
}

// One inference request through the gateway, from its TurnRequest (request/turn-request.ts): the
// stored session, prompt hashes (when the index has anything to match them against), the routing
// decision, then the worker call (worker-call.ts) and, off the client's path, the turn's record
// (turn-record.ts).
import type { TokenizeCall } from "../request/tokenize-call.js";
import type { TurnSession, TurnWorker } from "./ports.js";
import type { TurnRequest } from "../request/shapes.js";
import type { ServerResponse } from "node:http";
import { decisionLine } from "../../contract/decision-log.js";
import type { OverlapResult } from "../../index/index.js";
import { mayUse, SessionRefusedError } from "../auth/ownership.js";
import { requestBlockHashes } from "../workers/block-hashes.js";
import { errorBody, sendJson } from "../core/errors.js";
import {
  NoWorkerError,
  type RouteDecision,
  type RouteRequest,
  routeRequest,
} from "../workers/router.js";
import type { Telemetry } from "../telemetry/telemetry.js";
import type { TurnDeps } from "./turn-deps.js";
import { headerHints } from "./turn-hints.js";
import { finishTurn, turnFinished } from "./turn-record.js";
import { type CallOutcome, ClientLink, type DoneOutcome } from "./call.js";
import { callWorker } from "./worker-call.js";
import { schemeKey } from "../workers/worker-scheme.js";
import { tenantLabel } from "./tenant-label.js";
import { noteRequest, requestIdOf } from "../http/request-log.js";

/** What the turn knew before its first routing decision. */
interface Prepared {
  requestId: string;
  started: number;
  session: TurnSession | null;
  promptTokens: number[] | null;
  overlap: OverlapResult | null;
  /** Prompt block hashes per worker, in its scheme. */
  hashes: Map<TurnWorker, bigint[]>;
}

// At most three tries: a worker that refuses the connection has seen nothing of the request, so
// the request goes to the next choice (and the refusing worker is drained); a connection reset
// before any answer sends it again (the worker may have died: the next try finds out).
const MAX_ATTEMPTS = 3;

export async function serveTurn(
  deps: TurnDeps,
  tel: Telemetry,
  turn: TurnRequest,
  res: ServerResponse,
): Promise<void> {
  const startedAt = performance.now();
  // Notes for the request's log line, built only where requests are logged.
  const logged = !!tel.requestLog;
  if (logged)
    noteRequest(res.req, {
      route: turn.route,
      tenant: tenantLabel(turn),
      session: turn.session?.id ?? null,
    });
  let p: Prepared;
  try {
    p = await prepare(deps, tel, turn, requestIdOf(res.req));
  } catch (e) {
    if (!(e instanceof SessionRefusedError)) throw e;
    deps.auth?.count("other_tenant");
    tel.metrics.countRequest(turn.route, "none", 403);
    return sendJson(res, 403, errorBody(turn.flavor, "permission_error", e.message, "session"));
  }
  const client = new ClientLink(res);
  for (let attempt = 0; ; attempt++) {
    const worker = chooseWorker(deps, tel, turn, p, attempt);
    if (typeof worker === "string") {
      tel.metrics.countRequest(turn.route, "none", 503);
      return sendJson(res, 503, errorBody(turn.flavor, "service_unavailable", worker));
    }
    if (logged) noteRequest(res.req, { worker: worker.id });
    const outcome = await callWorker(deps, tel, {
      turn,
      worker,
      res,
      client,
      promptTokenCount: p.promptTokens?.length ?? 0,
      promptBlocks: p.hashes.get(worker) ?? null,
      startedAt,
    });
    if (
      outcome.kind === "retry" &&
      attempt < MAX_ATTEMPTS - 1 &&
      deps.workers.available().length > 0
    ) {
      attemptEnded(deps, tel, turn, p, worker, outcome.error);
      continue;
    }
    const done = settle(tel, res, turn, worker, outcome);
    if (logged) noteRequest(res.req, { error: done.error });
    record(deps, tel, turn, p, worker, done);
    return;
  }
}

async function prepare(
  deps: TurnDeps,
  tel: Telemetry,
  turn: TurnRequest,
  id: string | null,
): Promise<Prepared> {
  const sid = turn.session;
  const started = tel.clock.now();
  const requestId = id ?? tel.nextRequestId();
  if (sid) await deps.recording.get(sid.id);
  const session = sid ? await deps.sessions.get(sid.id) : null;
  if (session && !mayUse(turn, session)) throw new SessionRefusedError();
  for (const h of headerHints(
    tel,
    turn.hintHeader,
    sid?.id ?? null,
    session !== null,
    tel.clock.now(),
  ))
    deps.observe(h);
  const promptTokens = tokenizesBeforeRouting(deps, turn)
    ? await promptBeforeRouting(deps, tel, turn)
    : turn.promptTokens;
  const { overlap, hashes } = promptTokens
    ? overlapFor(deps, deps.workers.available(), promptTokens, turn)
    : { overlap: null, hashes: new Map<TurnWorker, bigint[]>() };
  return { requestId, started, session, promptTokens, overlap, hashes };
}

/**
 * Prompt tokens before routing: carried by the request, or from a worker's tokenizer when the
 * index holds blocks to match them against (with an empty index every overlap is zero anyway).
 */
function tokenizesBeforeRouting(deps: TurnDeps, turn: TurnRequest): boolean {
  return (
    !turn.promptTokens &&
    turn.tokenize !== null &&
    deps.config.routing.tokenize === "auto" &&
    deps.workers.available().length > 1 &&
    deps.index.stats().blocks > 0
  );
}

async function promptBeforeRouting(
  deps: TurnDeps,
  tel: Telemetry,
  turn: TurnRequest,
): Promise<number[] | null> {
  const w = deps.workers.available().reduce((a, b) => (b.inFlight < a.inFlight ? b : a));
  try {
    return await w.tokenizer.prompt(turn.tokenize as TokenizeCall);
  } catch (e) {
    tel.log.warn(
      `gateway: tokenize on ${w.id} before routing failed (${(e as Error).message}); routing without prompt hashes`,
    );
    return null;
  }
}

/** Overlap of the prompt per worker, each worker scored on hashes in its own scheme. */
function overlapFor(
  deps: TurnDeps,
  workers: readonly TurnWorker[],
  tokens: number[],
  turn: TurnRequest,
): { overlap: OverlapResult | null; hashes: Map<TurnWorker, bigint[]> } {
  const hashes = new Map<TurnWorker, bigint[]>();
  const byScheme = new Map<string, { hashes: BigInt64Array; overlap: OverlapResult }>();
  let merged: OverlapResult | null = null;
  for (const w of workers) {
    if (!w.scheme) continue;
    const key = schemeKey(w.scheme);
    let s = byScheme.get(key);
    if (!s) {
      const h = requestBlockHashes(tokens, w.scheme, turn.namespace);
      s = { hashes: h, overlap: deps.index.overlap(h) };
      byScheme.set(key, s);
    }
    hashes.set(w, Array.from(s.hashes));
    if (!merged)
      merged = {
        requestBlocks: s.overlap.requestBlocks,
        workers: new Map(),
        shared: s.overlap.shared,
      };
    const o = s.overlap.workers.get(w.id);
    if (o) merged.workers.set(w.id, o);
  }
  return { overlap: merged, hashes };
}

/** The prompt as the router sizes it on each worker: its tokens and its blocks in that worker's scheme. */
function promptOf(p: Prepared, workers: readonly TurnWorker[]): RouteRequest["prompt"] {
  return {
    tokens: p.promptTokens?.length ?? 0,
    blocksOn: (id) => {
      const w = workers.find((x) => x.id === id);
      return (w && p.hashes.get(w)) ?? null;
    },
  };
}

/** Routes one attempt: the chosen worker (logged, counted, TurnStarted observed), or why none. */
function chooseWorker(
  deps: TurnDeps,
  tel: Telemetry,
  turn: TurnRequest,
  p: Prepared,
  attempt: number,
): TurnWorker | string {
  const available = deps.workers.available();
  let decision: RouteDecision;
  try {
    const session = p.session
      ? { worker: p.session.worker, lastActivityMs: p.session.lastActivityMs }
      : null;
    decision = routeRequest(
      {
        workers: available.map((w) => w.state()),
        overlap: p.overlap,
        session,
        nowMs: tel.clock.now(),
        prompt: promptOf(p, available),
      },
      deps.config.routing,
      deps.rand,
    );
  } catch (e) {
    if (!(e instanceof NoWorkerError)) throw e;
    return e.message;
  }
  const worker = deps.workers.get(decision.worker) as TurnWorker;
  tel.metrics.decisions.inc({ worker: worker.id, reason: decision.reason });
  tel.decisionLog?.(routeLine(tel, turn, p, worker, decision, available, attempt));
  deps.observe({
    type: "TurnStarted",
    at: tel.clock.now(),
    requestId: p.requestId,
    sessionId: turn.session?.id ?? null,
    route: turn.route,
    stream: turn.stream,
    worker: worker.id,
    reason: decision.reason,
    promptBlocks: p.hashes.get(worker) ?? null,
    overlap: decision.overlap,
    model: turn.model,
    tail: turn.tail,
    stored: p.session
      ? {
          worker: p.session.worker,
          pins: p.session.pins,
          leases: p.session.leases,
          tool: p.session.tool,
        }
      : null,
    tenant: turn.tenant,
  });
  return worker;
}

function routeLine(
  tel: Telemetry,
  turn: TurnRequest,
  p: Prepared,
  worker: TurnWorker,
  d: RouteDecision,
  available: readonly TurnWorker[],
  attempt: number,
): string {
  return decisionLine(tel.clock.now(), "route", {
    request_id: p.requestId,
    route: turn.route,
    stream: turn.stream,
    session: turn.session?.id ?? null,
    session_from: turn.session?.from ?? null,
    worker: worker.id,
    reason: d.reason,
    session_moved: d.sessionMoved,
    match_rate: d.matchRate,
    request_blocks: p.overlap?.requestBlocks ?? null,
    overlap: d.overlap,
    in_flight: Object.fromEntries(available.map((w) => [w.id, w.inFlight])),
    attempt,
  });
}

/**
 * A try that is sent again ended on its worker unanswered: its TurnStarted gets its TurnFinished
 * (status 0), so what a policy took for it there (a queued request's hold) is released, not left
 * beside the next try's until its TTL. The turn's record is kept once, for the last try.
 */
function attemptEnded(
  deps: TurnDeps,
  tel: Telemetry,
  turn: TurnRequest,
  p: Prepared,
  worker: TurnWorker,
  error: string,
): void {
  deps.observe(
    turnFinished(turn, p.requestId, worker.id, p.started, tel.clock.now(), {
      status: 0,
      error: `sent again: ${error}`,
    }),
  );
}

/** The outcome the record keeps: a retry left over after the last try is answered 502 here. */
function settle(
  tel: Telemetry,
  res: ServerResponse,
  turn: TurnRequest,
  worker: TurnWorker,
  outcome: CallOutcome,
): DoneOutcome {
  if (outcome.kind === "done") return outcome;
  tel.metrics.countRequest(turn.route, worker.id, 502);
  sendJson(
    res,
    502,
    errorBody(
      turn.flavor,
      "upstream_error",
      `worker ${worker.id} failed before answering (${outcome.error})`,
    ),
  );
  return { kind: "done", status: 0, error: outcome.error, result: null };
}

/** Keeps the turn's record after the response went out (off the client's path). */
function record(
  deps: TurnDeps,
  tel: Telemetry,
  turn: TurnRequest,
  p: Prepared,
  worker: TurnWorker,
  outcome: DoneOutcome,
): void {
  const recording = finishTurn(deps, tel, {
    turn,
    worker,
    requestId: p.requestId,
    session: p.session,
    promptTokens: p.promptTokens,
    started: p.started,
    outcome,
  }).catch((e) =>
    tel.log.warn(`gateway: recording turn ${p.requestId} failed: ${(e as Error).message}`, {
      request_id: p.requestId,
    }),
  );
  const sid = turn.session;
  if (!sid) return;
  deps.recording.set(sid.id, recording);
  void recording.finally(() => {
    if (deps.recording.get(sid.id) === recording) deps.recording.delete(sid.id);
  });
}

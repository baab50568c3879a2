// A worker call's parts: what it carries, the client's side of it, and what came of it
// (worker-call.ts makes the call, answer-relay.ts passes the answer on).
import type { TurnWorker } from "./ports.js";
import type { TurnResult } from "../workers/turn-result.js";
import type { TurnRequest } from "../request/shapes.js";
import type { ServerResponse } from "node:http";
import { onResponseClose } from "../core/response-close.js";

/** The client's side of a turn: whether it went away, and the worker call to abort when it does. */
export class ClientLink {
  gone = false;
  private abortCall: (() => void) | null = null;
  constructor(res: ServerResponse) {
    onResponseClose(res, () => {
      if (res.writableFinished) return;
      this.gone = true;
      this.abortCall?.();
    });
  }
  /** The abort of the call now under way (aborted at once when the client is already gone). */
  onGone(abort: (() => void) | null): void {
    this.abortCall = abort;
    if (abort && this.gone) abort();
  }
}

export interface DoneOutcome {
  kind: "done";
  status: number;
  error: string | null;
  result: TurnResult | null;
}
export type CallOutcome = DoneOutcome | { kind: "retry"; error: string };

export interface WorkerCall {
  turn: TurnRequest;
  worker: TurnWorker;
  res: ServerResponse;
  client: ClientLink;
  /** Prompt tokens known before the call (0: not tokenized), for the worker's load and admission. */
  promptTokenCount: number;
  /** The prompt's block hashes in the worker's scheme (null: not hashed), for its in-flight KV. */
  promptBlocks: readonly bigint[] | null;
  /** When the turn began (performance.now()), for the latency histograms. */
  startedAt: number;
}

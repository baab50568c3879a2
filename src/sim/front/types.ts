// What the engine and its front say to each other about one request (a turn of a program).
import type { VirtualClock } from "../clock.js";
import type { PreparedRequest } from "../tokens.js";
import type { SimProgram, SimRequestSpec } from "../types.js";
import type { GateTicket } from "./parts.js";

export interface Turn {
  /** Request id, unique in the run. */
  rid: string;
  program: SimProgram;
  /** Its index in the program's requests. */
  n: number;
  spec: SimRequestSpec;
  prepared: PreparedRequest;
  /** When it reached the front (s). */
  arrival: number;
  /** The session its program is (null: a request of its own, as a flood's). */
  session: string | null;
  worker: string | null;
  ticket: GateTicket | null;
}

/** What a finished request reports back (the worker's token truth and cache hit). */
export interface TurnResult {
  /** Block hashes of its prompt and output (full pages). */
  chain: BigInt64Array;
  cachedTokens: number;
}

/** The engine, as the front sees it. */
export interface FrontHost {
  readonly clock: VirtualClock;
  readonly workers: readonly string[];
  readonly pageSize: number;
  /** Sends the turn to its worker now. */
  dispatch(turn: Turn, worker: string): void;
  /** Sends a command's bytes (an envelope) to a worker now; resolves with its ack's bytes. */
  command(worker: string, body: Uint8Array): Promise<Uint8Array>;
  /** SGLang's /close_session on a worker, now. */
  closeSession(worker: string, session: string): void;
}

export interface CommandCounts {
  sent: number;
  acked: Record<string, number>;
}

/** A configuration's front: routing, admission and policy between the programs and the fleet. */
export interface SimFront {
  /** Where the fleet's KV events go (null: this front reads none). */
  applyFrame(worker: string, payload: Uint8Array): void;
  arrive(turn: Turn): void;
  /** Its first token came (Dynamo's router counts prefill load until then). */
  firstToken(turn: Turn): void;
  finished(turn: Turn, result: TurnResult): void;
  /** The program's last request finished: its session ends. */
  programEnded(program: SimProgram): void;
  /** Commands sent and their acks by status, per command type. */
  commands(): Record<string, CommandCounts>;
}

// Output token ids of a streamed chat answer, from the worker that produced them. SGLang returns
// them at the end of a chat stream when the request carries `x-sglext-return-output-ids: 1`
// (serving_chat.py); with `x-sglext-ids-framed: 1` they come in an SSE event of their own,
// `event: sglext_ids`, every other byte of the stream unchanged. The gateway asks for both on a
// streamed chat turn to a worker that serves them (worker-features.ts), reads the ids in the
// stream scan, and drops that one event from the bytes the client gets. A client that asked for
// token ids in sglext itself gets its stream as the worker sends it: nothing added, nothing cut.
import type { TurnRequest } from "../request/shapes.js";
import type { IncomingHttpHeaders } from "node:http";

export const STREAM_IDS_HEADERS: Readonly<Record<string, string>> = {
  "x-sglext-return-output-ids": "1",
  "x-sglext-ids-framed": "1",
};

const CLIENT_ASKS_HEADERS = [
  "x-sglext-return-output-ids",
  "x-sglext-return-input-ids",
  "x-sglext-ids-framed",
];
const CLIENT_ASKS_FIELDS = ["return_output_ids_in_sglext", "return_input_ids_in_sglext"];

/** Whether the client asked for sglext token ids itself (a header, or either field anywhere in the body). */
export function clientAsksSglextIds(headers: IncomingHttpHeaders, raw: Buffer): boolean {
  if (CLIENT_ASKS_HEADERS.some((h) => headers[h] !== undefined)) return true;
  return CLIENT_ASKS_FIELDS.some((f) => raw.includes(f));
}

/** Whether the gateway asks this worker for the turn's output ids in a framed event (and cuts it). */
export function asksStreamOutputIds(turn: TurnRequest, workerServesThem: boolean): boolean {
  return (
    turn.stream &&
    turn.route === "chat" &&
    workerServesThem &&
    !clientAsksSglextIds(turn.headers, turn.raw)
  );
}

const FRAME_START = Buffer.from("event: sglext_ids\n");
const EVENT_END = Buffer.from("\n\n");

/**
 * Drops the `event: sglext_ids` events from an SSE byte stream and passes every other byte on.
 * Whole events go out as they complete; a chunk that ends inside an event holds that event's
 * bytes until the rest arrives (the worker writes each event whole, so this is rare).
 */
export class IdsFrameFilter {
  private held: Buffer | null = null;

  /** The bytes to send on for this chunk (possibly empty). */
  push(chunk: Buffer): Buffer {
    if (!this.held && chunk.indexOf(FRAME_START) < 0 && chunk.subarray(-2).equals(EVENT_END))
      return chunk;
    const buf = this.held ? Buffer.concat([this.held, chunk]) : chunk;
    const last = buf.lastIndexOf(EVENT_END);
    if (last < 0) {
      this.held = buf;
      return Buffer.alloc(0);
    }
    const whole = buf.subarray(0, last + 2);
    this.held = last + 2 < buf.length ? Buffer.from(buf.subarray(last + 2)) : null;
    return dropFrames(whole);
  }

  /** What is still held when the stream ends (an unfinished event, sent as it is). */
  end(): Buffer | null {
    const h = this.held;
    this.held = null;
    return h;
  }
}

/** Whole events, less those that open with the sglext_ids event line. */
function dropFrames(whole: Buffer): Buffer {
  if (whole.indexOf(FRAME_START) < 0) return whole;
  const parts: Buffer[] = [];
  let at = 0;
  while (at < whole.length) {
    const end = whole.indexOf(EVENT_END, at);
    const next = end < 0 ? whole.length : end + 2;
    const ev = whole.subarray(at, next);
    if (!ev.subarray(0, FRAME_START.length).equals(FRAME_START)) parts.push(ev);
    at = next;
  }
  return Buffer.concat(parts);
}

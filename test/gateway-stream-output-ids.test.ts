// A chat stream's output ids: the framed sglext event the gateway asks the worker for is read by
// the stream watcher and cut from the client's bytes, at any chunking, leaving every other byte;
// the gateway asks only on streamed chat to a worker that serves them, and never when the client
// asked for sglext ids itself. The real worker's side is in gateway-real-server-stream-ids.test.ts.
import type { TurnRequest } from "../src/gateway/request/shapes.js";
import { describe, expect, it } from "vitest";
import {
  asksStreamOutputIds,
  clientAsksSglextIds,
  IdsFrameFilter,
} from "../src/gateway/turn/stream-output-ids.js";
import { StreamScan } from "../src/gateway/turn/stream-scan.js";
import { servesStreamOutputIds } from "../src/gateway/workers/worker-features.js";

const data = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const plain =
  data({
    id: "x",
    choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }],
  }) +
  data({ id: "x", choices: [{ index: 0, delta: { content: "héllo" }, finish_reason: null }] }) +
  data({ id: "x", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }) +
  data({ id: "x", choices: [], sglext: { cached_tokens_details: { device: 3 } } });
const tail = `${data({ id: "x", choices: [], usage: { prompt_tokens: 9, completion_tokens: 3 } })}data: [DONE]\n\n`;
const frame = `event: sglext_ids\n${data({ id: "x", choices: [], sglext: { output_ids: [[11, 12, 13]] } })}`;

function through(text: string, cut: number): { out: string; scan: StreamScan } {
  const f = new IdsFrameFilter();
  const scan = new StreamScan("chat");
  const b = Buffer.from(text);
  const out: Buffer[] = [];
  for (let i = 0; i < b.length; i += cut) {
    const c = b.subarray(i, i + cut);
    scan.push(c);
    out.push(f.push(c));
  }
  const held = f.end();
  if (held) out.push(held);
  return { out: Buffer.concat(out).toString("utf8"), scan };
}

describe("gateway: output ids of a chat stream", () => {
  it("reads the framed ids and cuts the frame, every other byte kept, at any chunking", () => {
    for (const cut of [1, 2, 5, 7, 64, 100_000]) {
      const { out, scan } = through(plain + frame + tail, cut);
      expect(out).toBe(plain + tail);
      expect(scan.result().outputTokens).toEqual([11, 12, 13]);
      expect(scan.result().finishReason).toBe("stop");
    }
  });

  it("passes a stream without the frame through unchanged, and ids in a plain sglext chunk are read but kept", () => {
    const unframed = data({ id: "x", choices: [], sglext: { output_ids: [[4, 5]] } });
    const { out, scan } = through(plain + unframed + tail, 3);
    expect(out).toBe(plain + unframed + tail);
    expect(scan.result().outputTokens).toEqual([4, 5]);
    expect(through(plain + tail, 9).scan.result().outputTokens).toBeNull();
  });

  it("ignores output ids that are not a list of integers", () => {
    const bad = `event: sglext_ids\n${data({ id: "x", choices: [], sglext: { output_ids: [["a"]] } })}`;
    expect(through(plain + bad + tail, 4).scan.result().outputTokens).toBeNull();
  });

  it("asks only on streamed chat to a worker that serves the ids, and not when the client asked for sglext ids", () => {
    const turn = (o: Partial<TurnRequest>) =>
      ({ route: "chat", stream: true, headers: {}, raw: Buffer.from("{}"), ...o }) as TurnRequest;
    expect(asksStreamOutputIds(turn({}), true)).toBe(true);
    expect(asksStreamOutputIds(turn({}), false)).toBe(false);
    expect(asksStreamOutputIds(turn({ stream: false }), true)).toBe(false);
    expect(asksStreamOutputIds(turn({ route: "messages" }), true)).toBe(false);
    expect(asksStreamOutputIds(turn({ route: "completions" }), true)).toBe(false);
    expect(clientAsksSglextIds({ "x-sglext-ids-framed": "1" }, Buffer.from("{}"))).toBe(true);
    expect(clientAsksSglextIds({ "x-sglext-return-output-ids": "1" }, Buffer.from("{}"))).toBe(
      true,
    );
    expect(clientAsksSglextIds({}, Buffer.from('{"return_output_ids_in_sglext":true}'))).toBe(true);
    expect(
      asksStreamOutputIds(turn({ raw: Buffer.from('{"return_input_ids_in_sglext":true}') }), true),
    ).toBe(false);
  });

  it("reads the worker's support from its /server_info version", () => {
    expect(servesStreamOutputIds({ version: "0.5.23" })).toBe(true);
    expect(servesStreamOutputIds({ version: "0.5.24.post1" })).toBe(true);
    expect(servesStreamOutputIds({ version: "0.6.0" })).toBe(true);
    expect(servesStreamOutputIds({ version: "0.5.22" })).toBe(false);
    expect(servesStreamOutputIds({ version: "0.4.99" })).toBe(false);
    expect(servesStreamOutputIds({})).toBe(false);
    expect(servesStreamOutputIds({ version: "dev" })).toBe(false);
  });
});

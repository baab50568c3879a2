// The stream watcher: what a streamed answer tells the turn record (tool calls with their ids and
// names, the reasoning text, finish reason, usage), read from SSE bytes cut at arbitrary points.
// Chat chunks are shaped as SGLang 0.5.23 writes them (pydantic model_dump_json: every field,
// nulls included); the Anthropic ones as its /v1/messages stream.
import { describe, expect, it } from "vitest";
import { StreamScan } from "../src/gateway/turn/stream-scan.js";

const chat = (delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id: "x", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { role: null, content: null, reasoning_content: null, tool_calls: null, ...delta }, logprobs: null, finish_reason: finish, matched_stop: null }], usage: null })}\n\n`;

function feed(scan: StreamScan, text: string, cut = 7): void {
  const b = Buffer.from(text);
  for (let i = 0; i < b.length; i += cut) scan.push(b.subarray(i, i + cut));
}

describe("gateway: the stream watcher", () => {
  it("collects streamed chat tool calls (id and name from each call's first delta) and reasoning", () => {
    const scan = new StreamScan("chat");
    feed(
      scan,
      chat({ role: "assistant", content: "" }) +
        chat({ reasoning_content: "let me " }) +
        chat({ reasoning_content: "think" }) +
        chat({
          tool_calls: [
            { id: "call_a", index: 0, type: "function", function: { name: "ls", arguments: "" } },
          ],
        }) +
        chat({
          tool_calls: [
            {
              id: null,
              index: 0,
              type: "function",
              function: { name: null, arguments: '{"a":1}' },
            },
          ],
        }) +
        chat({
          tool_calls: [
            { id: "call_b", index: 1, type: "function", function: { name: "cd", arguments: "{}" } },
          ],
        }) +
        chat({}, "tool_calls") +
        `data: ${JSON.stringify({ id: "x", choices: [], usage: { prompt_tokens: 9, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 8 } } })}\n\n` +
        "data: [DONE]\n\n",
    );
    const r = scan.result();
    expect(r.toolCalls).toEqual([
      { id: "call_a", name: "ls" },
      { id: "call_b", name: "cd" },
    ]);
    expect(r.reasoningText).toBe("let me think");
    expect(r.finishReason).toBe("tool_calls");
    expect(r.usage.cachedTokens).toBe(8);
  });

  it("a plain answer has no tool calls and no reasoning", () => {
    const scan = new StreamScan("chat");
    feed(scan, chat({ content: "hi" }) + chat({}, "stop") + "data: [DONE]\n\n", 5);
    expect(scan.result()).toMatchObject({
      toolCalls: [],
      reasoningText: null,
      finishReason: "stop",
    });
  });

  it("collects Anthropic tool_use blocks and thinking deltas", () => {
    const scan = new StreamScan("messages");
    const ev = (name: string, data: Record<string, unknown>) =>
      `event: ${name}\ndata: ${JSON.stringify({ type: name, ...data })}\n\n`;
    feed(
      scan,
      ev("content_block_start", { index: 0, content_block: { type: "thinking", thinking: "" } }) +
        ev("content_block_delta", {
          index: 0,
          delta: { type: "thinking_delta", thinking: "hmm" },
        }) +
        ev("content_block_start", {
          index: 1,
          content_block: { type: "tool_use", id: "toolu_1", name: "search", input: {} },
        }) +
        ev("content_block_delta", {
          index: 1,
          delta: { type: "input_json_delta", partial_json: "{}" },
        }) +
        ev("message_delta", { delta: { stop_reason: "tool_use" }, usage: { output_tokens: 3 } }),
      11,
    );
    const r = scan.result();
    expect(r.toolCalls).toEqual([{ id: "toolu_1", name: "search" }]);
    expect(r.reasoningText).toBe("hmm");
    expect(r.finishReason).toBe("tool_use");
  });
});

// Watches a streamed answer's SSE bytes for what the turn record needs (finish reason, usage,
// tool calls, the reasoning text, the output ids of /generate and of chat streams that carry them
// in sglext, see stream-output-ids.ts) while the bytes go on to the client
// untouched.
import type { TurnResult } from "../workers/turn-result.js";
import type { RouteKind, ToolCallInfo } from "../../contract/observations.js";
import { usageOf } from "../workers/token-truth.js";
import { isIntArray, isObject } from "../core/json-shape.js";

/** Watches SSE bytes for the finish reason and usage (the last events), without holding them up. */
export class StreamScan {
  private tail = "";
  private finishReason: string | null = null;
  private usage: unknown = null;
  private outputIds: number[] = [];
  /** By the stream's tool-call index: the id and name arrive in the call's first delta. */
  private readonly toolCalls = new Map<number, ToolCallInfo>();
  private reasoning = "";
  constructor(private readonly route: RouteKind) {}

  push(chunk: Buffer): void {
    this.tail += chunk.toString("utf8");
    let nl: number;
    while ((nl = this.tail.indexOf("\n")) >= 0) {
      const line = this.tail.slice(0, nl);
      this.tail = this.tail.slice(nl + 1);
      if (!line.startsWith("data:") || !line.includes('"')) continue;
      if (
        !line.includes("finish_reason") &&
        !line.includes("usage") &&
        !line.includes("stop_reason") &&
        !line.includes("meta_info") &&
        !line.includes('"tool_use"') &&
        !line.includes('"thinking_delta"') &&
        !line.includes('"output_ids"')
      )
        continue;
      let ev: Record<string, unknown>;
      try {
        ev = JSON.parse(line.slice(5));
      } catch {
        continue;
      }
      if (ev.usage) this.usage = ev.usage;
      const choice = Array.isArray(ev.choices) ? (ev.choices[0] as Record<string, unknown>) : null;
      if (typeof choice?.finish_reason === "string") this.finishReason = choice.finish_reason;
      const delta = ev.delta as Record<string, unknown> | undefined;
      if (typeof delta?.stop_reason === "string") this.finishReason = delta.stop_reason;
      if (isObject(choice?.delta)) this.chatDelta(choice.delta);
      // Anthropic: a tool_use block opens with its id and name; thinking arrives in deltas.
      if (isObject(ev.content_block) && ev.content_block.type === "tool_use")
        this.addCall(this.toolCalls.size, ev.content_block.id, ev.content_block.name);
      if (delta?.type === "thinking_delta" && typeof delta.thinking === "string")
        this.reasoning += delta.thinking;
      // Chat: SGLang's sglext carries the output ids per choice (the gateway reads the first).
      if (
        this.route === "chat" &&
        isObject(ev.sglext) &&
        Array.isArray(ev.sglext.output_ids) &&
        isIntArray(ev.sglext.output_ids[0])
      )
        this.outputIds = ev.sglext.output_ids[0];
      if (this.route === "generate" && isObject(ev.meta_info)) {
        const fr = ev.meta_info.finish_reason as { type?: string } | null;
        if (fr && typeof fr.type === "string") this.finishReason = fr.type;
        const meta = ev.meta_info;
        this.usage = {
          prompt_tokens: meta.prompt_tokens,
          completion_tokens: meta.completion_tokens,
          prompt_tokens_details: { cached_tokens: meta.cached_tokens },
        };
        if (Array.isArray(ev.output_ids)) this.outputIds = ev.output_ids as number[];
      }
    }
  }

  private chatDelta(d: Record<string, unknown>): void {
    if (typeof d.reasoning_content === "string") this.reasoning += d.reasoning_content;
    if (!Array.isArray(d.tool_calls)) return;
    for (const t of d.tool_calls) {
      if (!isObject(t)) continue;
      const fn = isObject(t.function) ? t.function : null;
      this.addCall(typeof t.index === "number" ? t.index : this.toolCalls.size, t.id, fn?.name);
    }
  }

  private addCall(index: number, id: unknown, name: unknown): void {
    const c = this.toolCalls.get(index) ?? { id: null, name: null };
    if (c.id === null && typeof id === "string" && id !== "") c.id = id;
    if (c.name === null && typeof name === "string" && name !== "") c.name = name;
    this.toolCalls.set(index, c);
  }

  result(): TurnResult {
    return {
      promptTokens: null,
      outputTokens:
        (this.route === "generate" || this.route === "chat") && this.outputIds.length
          ? this.outputIds
          : null,
      finishReason: this.finishReason,
      usage: usageOf(this.usage),
      toolCalls: [...this.toolCalls.values()],
      reasoningText: this.reasoning === "" ? null : this.reasoning,
    };
  }
}

// Watches a streamed answer's SSE bytes for what the turn record needs (finish reason, usage,
// /generate's output ids) while the bytes go on to the client untouched.
import type { RouteKind } from "./observations.js";
import { type TurnResult, usageOf } from "./token-truth.js";
import { isObject } from "./turn-context.js";

/** Watches SSE bytes for the finish reason and usage (the last events), without holding them up. */
export class StreamScan {
  private tail = "";
  private finishReason: string | null = null;
  private usage: unknown = null;
  private outputIds: number[] = [];
  constructor(private readonly route: RouteKind) {}

  push(chunk: Buffer): void {
    this.tail += chunk.toString("utf8");
    let nl: number;
    while ((nl = this.tail.indexOf("\n")) >= 0) {
      const line = this.tail.slice(0, nl);
      this.tail = this.tail.slice(nl + 1);
      if (!line.startsWith("data:") || !line.includes('"')) continue;
      if (!line.includes("finish_reason") && !line.includes("usage") && !line.includes("stop_reason") && !line.includes("meta_info")) continue;
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
      if (this.route === "generate" && isObject(ev.meta_info)) {
        const fr = ev.meta_info.finish_reason as { type?: string } | null;
        if (fr && typeof fr.type === "string") this.finishReason = fr.type;
        const meta = ev.meta_info;
        this.usage = { prompt_tokens: meta.prompt_tokens, completion_tokens: meta.completion_tokens, prompt_tokens_details: { cached_tokens: meta.cached_tokens } };
        if (Array.isArray(ev.output_ids)) this.outputIds = ev.output_ids as number[];
      }
    }
  }

  result(): TurnResult {
    return {
      promptTokens: null,
      outputTokens: this.route === "generate" && this.outputIds.length ? this.outputIds : null,
      finishReason: this.finishReason,
      usage: usageOf(this.usage),
      toolCalls: [],
      reasoningText: null,
    };
  }
}

// What a worker's answer to a turn carried, as the gateway reads it (token-truth.ts from a whole
// body, stream-scan.ts from a stream). Types only.
import type { ToolCallInfo, Usage } from "../../contract/observations.js";

export interface TurnResult {
  promptTokens: number[] | null;
  outputTokens: number[] | null;
  finishReason: string | null;
  usage: Usage;
  toolCalls: ToolCallInfo[];
  /** Text the worker's reasoning parser separated out (chat), for locating the reasoning range. */
  reasoningText: string | null;
}

// The last message of a prompt: whose turn it is (a user, or tool results coming back) and which
// tool calls those results answer. OpenAI: trailing `role:"tool"` messages with `tool_call_id`;
// Anthropic: a user message whose content is `tool_result` blocks with `tool_use_id`.
import type { PromptTail, RouteKind } from "../../contract/observations.js";
import { objectOf as obj } from "../core/json-shape.js";

export function promptTailOf(route: RouteKind, body: Record<string, unknown>): PromptTail | null {
  if (route !== "chat" && route !== "messages") return null;
  const msgs = Array.isArray(body.messages) ? body.messages : [];
  const last = obj(msgs[msgs.length - 1]);
  if (!last) return null;
  const role = typeof last.role === "string" ? last.role : null;
  if (route === "chat") {
    if (role !== "tool") return { role, toolCallIds: [] };
    const ids: string[] = [];
    for (let i = msgs.length - 1; i >= 0; i--) {
      const m = obj(msgs[i]);
      if (m?.role !== "tool") break;
      if (typeof m.tool_call_id === "string") ids.unshift(m.tool_call_id);
    }
    return { role: "tool", toolCallIds: ids };
  }
  const blocks = Array.isArray(last.content) ? last.content.map(obj) : [];
  const results = blocks.filter((b) => b?.type === "tool_result");
  if (role === "user" && results.length > 0) {
    return {
      role: "tool",
      toolCallIds: results.flatMap((b) =>
        typeof b?.tool_use_id === "string" ? [b.tool_use_id] : [],
      ),
    };
  }
  return { role, toolCallIds: [] };
}

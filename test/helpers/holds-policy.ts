// A scripted policy for the hold-ledger tests: each turn holds its session's blocks while in
// flight (released at its end; a sessionless request holds blocksOf(SESSIONLESS)), the first turn's end pins them as a marker, an "idle" hint pauses
// the session under a new lease, and a "tool_start" hint offloads it. It keeps no other state, so
// a replica running it knows only what it did itself, as a replica running the agent policy does.
import type { GatewayPolicy, PolicyCommand } from "../../src/contract/policy.js";

/** What a sessionless request's in-flight hold covers (the first three of blocksOf(SESSIONLESS)). */
export const SESSIONLESS = "(sessionless)";

/** Four block hashes per session, from its id. */
export function blocksOf(sid: string): bigint[] {
  let h = 7n;
  for (const c of sid) h = (h * 131n + BigInt(c.charCodeAt(0))) % 1_000_000_007n;
  return [h * 10n + 1n, h * 10n + 2n, h * 10n + 3n, h * 10n + 4n];
}

export function holdsPolicy(seen: unknown[] = []): GatewayPolicy {
  const marked = new Set<string>();
  let leases = 0;
  return {
    name: "holds-script",
    observe(o) {
      seen.push(o);
      const out: PolicyCommand[] = [];
      if (o.type === "TurnStarted" && !o.sessionId) {
        out.push({
          worker: o.worker,
          sessionId: null,
          hold: "inflight",
          reason: "in flight",
          command: {
            type: "Cache",
            block_hashes: blocksOf(SESSIONLESS).slice(0, 3),
            pin: true,
            ttl_seconds: 120,
          },
        });
      } else if (o.type === "TurnFinished" && !o.sessionId) {
        out.push({
          worker: o.worker,
          sessionId: null,
          hold: "inflight",
          reason: "served",
          command: { type: "Cache", block_hashes: blocksOf(SESSIONLESS).slice(0, 3), pin: false },
        });
      } else if (o.type === "TurnStarted" && o.sessionId) {
        out.push({
          worker: o.worker,
          sessionId: o.sessionId,
          hold: "inflight",
          reason: "in flight",
          command: {
            type: "Cache",
            block_hashes: blocksOf(o.sessionId).slice(0, 3),
            pin: true,
            ttl_seconds: 120,
          },
        });
      } else if (o.type === "TurnFinished" && o.sessionId) {
        out.push({
          worker: o.worker,
          sessionId: o.sessionId,
          hold: "inflight",
          reason: "served",
          command: { type: "Cache", block_hashes: blocksOf(o.sessionId).slice(0, 3), pin: false },
        });
        if (o.status === 200 && !marked.has(o.sessionId)) {
          marked.add(o.sessionId);
          out.push({
            worker: o.worker,
            sessionId: o.sessionId,
            hold: "marker",
            reason: "marker",
            command: {
              type: "Cache",
              block_hashes: blocksOf(o.sessionId),
              pin: true,
              ttl_seconds: 3600,
            },
          });
        }
      } else if (o.type === "SessionHint" && o.event === "idle") {
        out.push({
          worker: "w0",
          sessionId: o.sessionId,
          reason: "idle",
          command: {
            type: "Pause",
            block_hashes: blocksOf(o.sessionId),
            ttl_seconds: 600,
            lease_id: `${o.sessionId}.${++leases}`,
          },
        });
      } else if (o.type === "SessionHint" && o.event === "tool_start") {
        out.push({
          worker: "w0",
          sessionId: o.sessionId,
          reason: "offload",
          command: {
            type: "ToolStart",
            session_id: o.sessionId,
            block_hashes: blocksOf(o.sessionId),
          },
        });
      }
      return out;
    },
  };
}

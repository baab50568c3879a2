// The gateway's admission per worker, by `admission.mode`: request (admission.ts: each request on
// its own) or program (program-admission.ts: a session's tool loop as one unit).
import { AdmissionGate, type Gate } from "./admission.js";
import type { AdmissionConfig } from "./config/admission.js";
import type { ProgramRetention } from "../contract/policy.js";
import { type GateTimers, ProgramGate, type ProgramReleasedHook } from "./program-admission.js";

/** The worker's gate under the configured admission, or null when admission is off. */
export function admissionGate(
  a: AdmissionConfig,
  retention: ProgramRetention | null = null,
  released: ProgramReleasedHook | null = null,
  timers?: GateTimers,
): Gate | null {
  if (a.mode === "program") {
    return new ProgramGate(
      {
        maxPrograms: a.maxRequestsPerWorker as number,
        capacityTokens: a.capacityTokensPerWorker as number,
        pauseAt: a.pauseAt,
        resumeBelow: a.resumeBelow,
        holdMs: a.holdSeconds * 1000,
        prefetchDeadlineMs: a.prefetchDeadlineMs,
      },
      retention,
      released,
      timers,
    );
  }
  const limits = {
    maxRequests: a.maxRequestsPerWorker,
    maxPromptTokens: a.maxPromptTokensPerWorker,
  };
  return AdmissionGate.enabled(limits) ? new AdmissionGate(limits) : null;
}

/** Whether a turn's reply keeps its session in its tool loop (it ended in a tool call). */
export function continuesToolLoop(
  result: { finishReason: string | null; toolCalls: readonly unknown[] } | null,
): boolean {
  if (!result) return false;
  return (
    result.toolCalls.length > 0 ||
    result.finishReason === "tool_calls" ||
    result.finishReason === "tool_use"
  );
}

// Observations for the policy tests, on a fake clock: a session's turns as the gateway reports them.
import type {
  CacheMarkers,
  Observation,
  PromptTail,
  TurnFinished,
  TurnStarted,
} from "../../src/contract/observations.js";
import type { PolicyCommand } from "../../src/contract/policy.js";
import type { Command } from "../../src/protocol/index.js";

export const PAGE = 4;

/** A chain of n distinct block hashes starting at `base`. */
export const chainOf = (n: number, base = 1000n): bigint[] =>
  Array.from({ length: n }, (_, i) => base + BigInt(i));

export function started(
  at: number,
  sessionId: string,
  extra: Partial<TurnStarted> = {},
): TurnStarted {
  return {
    type: "TurnStarted",
    at,
    requestId: `r${at}`,
    sessionId,
    route: "chat",
    stream: false,
    worker: "w0",
    reason: "session",
    promptBlocks: null,
    overlap: null,
    tail: { role: "user", toolCallIds: [] },
    ...extra,
  };
}

export function finished(
  at: number,
  sessionId: string,
  chain: bigint[],
  extra: Partial<TurnFinished> & { promptBlocks?: number; markers?: CacheMarkers } = {},
): TurnFinished {
  const { promptBlocks, markers, ...rest } = extra;
  const pb = promptBlocks ?? chain.length;
  return {
    type: "TurnFinished",
    at,
    requestId: `r${at}`,
    sessionId,
    route: "chat",
    worker: "w0",
    status: 200,
    error: null,
    finishReason: "stop",
    usage: { promptTokens: pb * PAGE, completionTokens: 1, cachedTokens: 0 },
    promptTokens: Array.from({ length: pb * PAGE }, (_, i) => i + 1),
    outputTokens: [1],
    chain,
    ranges: null,
    toolCalls: [],
    durationMs: 10,
    cacheMarkers: markers ?? null,
    model: "tiny",
    ...rest,
  };
}

export const tail = (role: string, ids: string[] = []): PromptTail => ({ role, toolCallIds: ids });

export const joined = (at: number, worker = "w0"): Observation => ({
  type: "WorkerJoined",
  at,
  worker,
  pageSize: PAGE,
});

/** The acked observation of a command the policy sent. */
export function ack(
  at: number,
  pc: PolicyCommand,
  status: string,
  extra: {
    affected?: number;
    missing?: bigint[];
    skipped?: number;
    epoch?: number | null;
    detail?: string;
  } = {},
): Observation {
  return {
    type: "CommandAcked",
    at,
    sessionId: pc.sessionId ?? null,
    worker: pc.worker,
    commandType: pc.command.type,
    status,
    commandId: pc.id ?? null,
    command: pc.command,
    affected: extra.affected ?? 0,
    ...(extra.missing !== undefined ? { missing: extra.missing } : {}),
    ...(extra.skipped !== undefined ? { skipped: extra.skipped } : {}),
    epoch: extra.epoch ?? null,
    detail: extra.detail ?? null,
  };
}

export const types = (out: readonly PolicyCommand[]): string[] => out.map((c) => c.command.type);
export const cmd = <T extends Command["type"]>(
  out: readonly PolicyCommand[],
  type: T,
): Extract<Command, { type: T }> => {
  const c = out.find((x) => x.command.type === type);
  if (!c) throw new Error(`no ${type} in ${JSON.stringify(types(out))}`);
  return c.command as Extract<Command, { type: T }>;
};

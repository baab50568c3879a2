// createGateway(): the library entry behind `kvctl gateway`. Wires the parts: config -> workers
// (probed, subscribed to their KV events feeding one index) -> NATS link (session bucket,
// control publisher) -> session store -> policy and command sink -> HTTP server.
import { InMemoryKvIndex, type KvIndex } from "../index/index.js";
import { CommandSink, type CommandOutcome } from "./command-sink.js";
import { type GatewayConfig, type GatewayConfigInput, parseGatewayConfig } from "./config.js";
import { GatewayMetrics } from "./metrics.js";
import { NatsLink } from "./nats-link.js";
import type { Observation } from "./observations.js";
import { createAgentPolicy } from "../policy/agent-policy.js";
import { type GatewayPolicy, loggingPolicy, noopPolicy, type PolicyCommand } from "./policy.js";
import { buildServer } from "./server.js";
import { applyAckToRecord, type CommandRecord, type SessionRecord } from "./session-record.js";
import { type Clock, SessionStore, systemClock } from "./session-store.js";
import type { TurnContext } from "./turn.js";
import { WorkerSet } from "./workers.js";

export interface GatewayOptions {
  /** The configuration (validated here; see config.ts). */
  config: GatewayConfigInput;
  /** The index the workers' KV events feed (default: the in-memory index). */
  index?: KvIndex;
  /** Overrides config.policy with a policy object. */
  policy?: GatewayPolicy;
  clock?: Clock;
  rand?: () => number;
  /** Operational log lines (default stderr). */
  log?: (line: string) => void;
  /** Where --json-log decision lines go (default stdout). */
  decisionLog?: (line: string) => void;
}

export interface Gateway {
  readonly url: string;
  readonly port: number;
  readonly config: GatewayConfig;
  readonly metrics: GatewayMetrics;
  readonly index: KvIndex;
  readonly sessions: SessionStore;
  /** Reports sessions idle past sessions.idleAfterSeconds to the policy (a timer calls it too). */
  sweepIdle(): Promise<void>;
  /** One round of worker health checks now. */
  checkHealth(): Promise<void>;
  /** Resolves when recorded turns and sent commands have settled (tests). */
  settled(): Promise<void>;
  close(): Promise<void>;
}

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const config = parseGatewayConfig(options.config, "gateway config");
  const log = options.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const clock = options.clock ?? systemClock;
  const metrics = new GatewayMetrics();
  const index = options.index ?? new InMemoryKvIndex();
  const decisionLog = config.jsonLog ? (options.decisionLog ?? ((l: string) => process.stdout.write(`${l}\n`))) : null;
  const policy =
    options.policy ??
    (config.policy === "log"
      ? loggingPolicy(log)
      : config.policy === "agent"
        ? createAgentPolicy({ config: config.policies, registry: metrics.registry, log, decisionLog })
        : noopPolicy);

  const nats = new NatsLink(config, metrics, log);
  const sessions = new SessionStore({ kv: () => nats.kv(), configured: nats.configured, opTimeoutMs: config.nats?.opTimeoutMs ?? 500, metrics, clock, log });

  // Session-record updates for command outcomes still in flight (settled() waits for them).
  const commandRecords = new Set<Promise<unknown>>();
  const recordCommand = (pc: PolicyCommand, outcome: CommandOutcome) => {
    const now = clock.now();
    if (decisionLog) {
      decisionLog(
        JSON.stringify({
          ts: new Date(now).toISOString(),
          event: "command",
          session: pc.sessionId ?? null,
          worker: pc.worker,
          type: pc.command.type,
          reason: pc.reason,
          state: outcome.state,
          id: outcome.id,
          elapsed_ms: outcome.state === "dropped" ? undefined : outcome.elapsedMs,
          acks: outcome.state === "acked" ? outcome.acks.map((a) => ({ worker: a.worker_id, status: a.status, affected: a.affected })) : undefined,
          error: outcome.state === "acked" ? undefined : outcome.error,
        }),
      );
    }
    if (outcome.state === "acked") {
      for (const a of outcome.acks) {
        observe({
          type: "CommandAcked",
          at: now,
          sessionId: pc.sessionId ?? null,
          worker: a.worker_id,
          commandType: pc.command.type,
          status: a.status,
          command: pc.command,
          affected: a.affected,
          missing: a.missing,
          skipped: a.skipped,
          epoch: a.epoch,
          detail: a.reason,
        });
      }
    } else {
      observe({ type: "CommandAcked", at: now, sessionId: pc.sessionId ?? null, worker: pc.worker, commandType: pc.command.type, status: outcome.state, command: pc.command, detail: outcome.error });
    }
    if (!pc.sessionId) return;
    const entry = (worker: string, state: string, detail: string | null): CommandRecord => ({
      id: outcome.id,
      worker,
      type: pc.command.type,
      reason: pc.reason,
      createdMs: now,
      state,
      ackedMs: outcome.state === "acked" ? now : null,
      detail,
    });
    const recorded = sessions
      .update(pc.sessionId, (rec: SessionRecord) => {
        if (outcome.state === "acked") {
          for (const a of outcome.acks) {
            rec.commands.push(entry(a.worker_id, a.status, a.reason));
            applyAckToRecord(rec, a.worker_id, pc.command, a, now);
          }
        } else rec.commands.push(entry(pc.worker, outcome.state, outcome.error));
        const max = config.sessions.maxCommands;
        if (rec.commands.length > max) rec.commands.splice(0, rec.commands.length - max);
      })
      .catch((e) => log(`gateway: recording a command in session ${pc.sessionId}: ${(e as Error).message}`));
    commandRecords.add(recorded);
    void recorded.finally(() => commandRecords.delete(recorded));
  };

  const commands = new CommandSink({
    publisher: () => (nats.connected ? nats.publisher : null),
    maxQueued: config.limits.commandQueue,
    metrics,
    onOutcome: recordCommand,
    log,
  });
  nats.whenUp(() => commands.flush());

  function observe(o: Observation): void {
    let out: readonly PolicyCommand[];
    try {
      out = policy.observe(o);
    } catch (e) {
      log(`gateway: policy ${policy.name} threw on ${o.type}: ${(e as Error).message} (ignored)`);
      return;
    }
    for (const pc of out) commands.submit(pc);
  }

  const workers = new WorkerSet({ config, index, metrics, clock, observe, log });
  let requestSeq = 0;
  const ctx: TurnContext = {
    config,
    workers,
    index,
    sessions,
    metrics,
    clock,
    observe,
    decisionLog,
    log,
    rand: options.rand ?? Math.random,
    nextRequestId: () => `gw-${process.pid.toString(36)}-${(++requestSeq).toString(36)}`,
    recording: new Map(),
  };

  const idleNotified = new Map<string, number>();
  const activeWindowMs = Math.max(1, config.sessions.idleAfterSeconds) * 1000;
  const sweepIdle = async () => {
    const now = clock.now();
    for (const local of [...sessions.localRecords()]) {
      if (now - local.lastActivityMs < config.sessions.idleAfterSeconds * 1000) continue;
      if (idleNotified.get(local.id) === local.lastActivityMs) continue;
      // Another replica may have served a later turn: the bucket has the truth.
      const rec = (await sessions.get(local.id)) ?? local;
      if (now - rec.lastActivityMs < config.sessions.idleAfterSeconds * 1000) continue;
      if (idleNotified.get(rec.id) === rec.lastActivityMs) continue;
      idleNotified.set(rec.id, rec.lastActivityMs);
      observe({ type: "SessionIdle", at: now, sessionId: rec.id, worker: rec.worker, idleMs: now - rec.lastActivityMs, chain: rec.chain.map((h) => BigInt(h)) });
    }
  };

  const cleanup: (() => Promise<void>)[] = [];
  try {
    await workers.start();
    cleanup.push(() => workers.close());
    await nats.start();
    cleanup.push(() => nats.close());
  } catch (e) {
    await workers.close().catch(() => undefined);
    await nats.close().catch(() => undefined);
    throw e;
  }

  const { app, front } = buildServer(
    {
      ctx,
      workers,
      metrics,
      beforeScrape: () => {
        const now = clock.now();
        let active = 0;
        for (const r of sessions.localRecords()) if (now - r.lastActivityMs < activeWindowMs) active++;
        metrics.sessionsActive.set(active);
        metrics.commandsQueued.set(commands.queued);
        for (const w of workers.workers) metrics.inFlight.set({ worker: w.id }, w.inFlight);
      },
    },
    config.limits.bodyLimitBytes,
  );
  let idleTimer: NodeJS.Timeout | null = null;
  try {
    await app.listen({ host: config.listen.host, port: config.listen.port });
  } catch (e) {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
    throw e;
  }
  if (config.sessions.idleAfterSeconds > 0) {
    idleTimer = setInterval(() => void sweepIdle().catch((e) => log(`gateway: idle sweep: ${(e as Error).message}`)), Math.max(1000, (config.sessions.idleAfterSeconds * 1000) / 2));
    idleTimer.unref();
  }
  const addr = app.server.address();
  const port = typeof addr === "object" && addr ? addr.port : config.listen.port;
  const host = config.listen.host.includes(":") ? `[${config.listen.host}]` : config.listen.host;

  return {
    url: `http://${host === "0.0.0.0" ? "127.0.0.1" : host}:${port}`,
    port,
    config,
    metrics,
    index,
    sessions,
    sweepIdle,
    checkHealth: () => workers.checkHealth(),
    async settled() {
      do {
        await Promise.all([...ctx.recording.values()]);
        await commands.settled();
        await Promise.all([...commandRecords]);
        // A turn that finished meanwhile may have sent commands after the wait above began.
      } while (ctx.recording.size > 0 || commandRecords.size > 0 || commands.inFlight > 0);
    },
    async close() {
      if (idleTimer) clearInterval(idleTimer);
      front.close();
      await app.close();
      await Promise.all([...ctx.recording.values()]).catch(() => undefined);
      await commands.settled().catch(() => undefined);
      for (const c of cleanup.reverse()) await c().catch(() => undefined);
    },
  };
}

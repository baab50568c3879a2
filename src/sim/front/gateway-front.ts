// The kvctl gateway's front in the simulation: its router (KV overlap on the index the workers'
// events feed, sessions, load), its admission per worker (per request or per program, with the
// policy's retention), the agent policy with its command sink, and SGLang session-radix closes,
// all the gateway's own objects (parts.ts) on the virtual clock. Round robin (`lru`) is the same
// front with the router replaced by the next worker in turn.
import { Registry } from "prom-client";
import type { SimConfigSpec } from "../configs.js";
import { seededRandom } from "../random.js";
import { turnFinished, turnStarted, callsTool } from "./observations.js";
import {
  type AgentPolicy,
  ackObservations,
  admissionGate,
  CommandSink,
  type CommandOutcome,
  createAgentPolicy,
  type Gate,
  type GatewayConfig,
  GatewayMetrics,
  heldPrefix,
  InFlightKv,
  InMemoryKvIndex,
  type Observation,
  parseGatewayConfig,
  type PolicyCommand,
  prefetchSender,
  RadixSessions,
  routeRequest,
} from "./parts.js";
import { SimPublisher, simPool } from "./sim-publisher.js";
import type { CommandCounts, FrontHost, SimFront, Turn, TurnResult } from "./types.js";

export interface GatewayFrontOptions {
  host: FrontHost;
  config: SimConfigSpec;
  /** The admission budget: requests (or programs) per worker. */
  perWorker: number;
  /** A worker's device + host KV capacity (tokens): program admission holds working sets to it. */
  capacityTokens: number;
  /** A worker's device KV pool (tokens): what a real worker's /server_info says. */
  deviceTokens: number;
  /** The agent policy's settings (its `policies` section), for the agent configurations. */
  policies?: Record<string, unknown>;
  /** The model name turns carry (the think rule reads it). */
  model: string;
  seed: number;
  log?: (line: string) => void;
}

interface Slot {
  id: string;
  inFlight: number;
  inFlightPromptTokens: number;
  /** The device KV of the prompts in flight there, shared blocks once (the gateway's own count). */
  inFlightKv: InFlightKv;
  gate: Gate | null;
}

interface SessionView {
  worker: string | null;
  lastActivityMs: number;
  chain: bigint[];
}

const quiet = { info() {}, warn() {}, error() {} };

function gatewayConfig(o: GatewayFrontOptions): GatewayConfig {
  const admission =
    o.config.admission === "program"
      ? {
          mode: "program",
          maxRequestsPerWorker: o.perWorker,
          capacityTokensPerWorker: o.capacityTokens,
        }
      : { maxRequestsPerWorker: o.perWorker };
  return parseGatewayConfig(
    {
      workers: o.host.workers.map((id) => ({ id, url: "http://sim.invalid:1" })),
      admission,
      // The gateway's defaults for its policy (withAgentDefaults) apply as `kvctl gateway` applies them.
      policy: o.config.policy,
      ...(o.policies ? { policies: o.policies } : {}),
    },
    `configuration ${o.config.name}`,
  );
}

export class GatewayFront implements SimFront {
  readonly index = new InMemoryKvIndex();
  private readonly cfg: GatewayConfig;
  private readonly slots = new Map<string, Slot>();
  private readonly sessions = new Map<string, SessionView>();
  private readonly publisher: SimPublisher;
  private readonly policy: AgentPolicy | null = null;
  private readonly sink: CommandSink | null = null;
  private readonly radix: RadixSessions | null = null;
  private readonly rand: () => number;
  private rr = 0;
  /** Each turn in flight's count out of its worker's in-flight KV. */
  private readonly leaveKv = new Map<Turn, () => void>();

  constructor(private readonly o: GatewayFrontOptions) {
    this.cfg = gatewayConfig(o);
    this.rand = seededRandom(o.seed);
    this.publisher = new SimPublisher(o.host, `sim-${o.config.name}`);
    const metrics = new GatewayMetrics();
    const log = { ...quiet, warn: (l: string) => o.log?.(l), error: (l: string) => o.log?.(l) };
    if (o.config.policy === "agent") {
      this.policy = createAgentPolicy({
        config: this.cfg.policies,
        registry: new Registry(),
        log: (l) => o.log?.(l),
        decisionLog: null,
        now: () => o.host.clock.nowMs(),
      });
      this.sink = new CommandSink({
        publisher: () => this.publisher.asPublisher(),
        maxQueued: this.cfg.limits.commandQueue,
        metrics,
        onOutcome: (pc, outcome) => this.outcome(pc, outcome),
        log: log as never,
      });
    }
    if (o.config.sessionRadix)
      this.radix = new RadixSessions({
        workers: () =>
          o.host.workers.map((id) => ({
            id,
            pool: simPool(o.host, id) as never,
            sessionRadix: true,
          })),
        registry: metrics.registry,
        log: log as never,
        timeoutMs: this.cfg.health.timeoutMs,
      });
    for (const id of o.host.workers) this.slots.set(id, this.slot(id, metrics, log));
  }

  private slot(id: string, metrics: GatewayMetrics, log: unknown): Slot {
    const host = this.o.host;
    const retention =
      this.policy?.programRetention && this.cfg.admission.mode === "program"
        ? this.policy.programRetention(
            id,
            () => host.pageSize,
            prefetchSender({
              publisher: () => this.publisher.asPublisher(),
              worker: id,
              deadlineMs: this.cfg.admission.prefetchDeadlineMs,
              metrics,
              log: log as never,
              held: (blocks) => heldPrefix(this.index, id, blocks),
            }),
          )
        : null;
    const released = this.radix
      ? (program: string, why: "let_go" | "pressure") =>
          this.radix?.release(
            { id, pool: simPool(host, id) as never, sessionRadix: true },
            program,
            why,
          )
      : null;
    const gate = admissionGate(this.cfg.admission, retention, released, host.clock.timers);
    return { id, inFlight: 0, inFlightPromptTokens: 0, inFlightKv: new InFlightKv(), gate };
  }

  private observe(o: Observation): void {
    this.radix?.observe(o);
    if (!this.policy || !this.sink) return;
    for (const pc of this.policy.observe(o)) this.sink.submit(pc);
  }

  private outcome(pc: PolicyCommand, outcome: CommandOutcome): void {
    for (const o of ackObservations(this.o.host.clock.nowMs(), pc, outcome)) this.observe(o);
  }

  applyFrame(worker: string, payload: Uint8Array): void {
    this.index.applyFrame(worker, payload);
  }

  private route(turn: Turn): {
    worker: string;
    reason: string;
    overlap: ReturnType<typeof routeRequest>["overlap"];
  } {
    const ids = this.o.host.workers;
    if (this.o.config.front === "round_robin") {
      const worker = ids[this.rr++ % ids.length];
      return { worker, reason: "round_robin", overlap: null };
    }
    const hashes = turn.prepared.promptHashes;
    const overlap = hashes.length && this.index.blocks() > 0 ? this.index.overlap(hashes) : null;
    const s = turn.session ? this.sessions.get(turn.session) : undefined;
    const d = routeRequest(
      {
        workers: ids.map((id) => {
          const w = this.slots.get(id) as Slot;
          const state = { inFlight: w.inFlight, inFlightPromptTokens: w.inFlightPromptTokens };
          const pageSize = this.o.host.pageSize;
          const device = { deviceTokens: this.o.deviceTokens, inFlightKv: w.inFlightKv };
          return { id, ...state, stale: false, pageSize, ...device };
        }),
        overlap,
        session: s ? { worker: s.worker, lastActivityMs: s.lastActivityMs } : null,
        nowMs: this.o.host.clock.nowMs(),
        prompt: { tokens: turn.prepared.promptLen, blocksOn: () => hashes },
      },
      this.cfg.routing,
      this.rand,
    );
    return { worker: d.worker, reason: d.reason, overlap: d.overlap };
  }

  arrive(turn: Turn): void {
    const d = this.route(turn);
    const slot = this.slots.get(d.worker) as Slot;
    turn.worker = d.worker;
    slot.inFlight++;
    slot.inFlightPromptTokens += turn.prepared.promptLen;
    const { promptHashes, promptLen } = turn.prepared;
    this.leaveKv.set(turn, slot.inFlightKv.enter(promptHashes, promptLen, this.o.host.pageSize));
    const started = turnStarted(turn, this.o.host.clock.nowMs(), d.reason, d.overlap, this.o.model);
    // The session record's worker (what RadixSessions reads to close a session that moved). With
    // the agent policy the gateway's record also names its holds; the sim keeps none, and the
    // policy, which never loses its view of a session here, has nothing to restore from it: the
    // record goes to RadixSessions alone.
    const prev = turn.session ? this.sessions.get(turn.session) : undefined;
    if (prev && started.type === "TurnStarted") {
      const stored = { worker: prev.worker, pins: [], leases: [], tool: null };
      if (this.policy) this.radix?.observe({ ...started, stored });
      else started.stored = stored;
    }
    this.observe(started);
    turn.ticket = slot.gate?.enter(turn.prepared.promptLen, turn.session) ?? null;
    if (!turn.ticket?.queued) this.o.host.dispatch(turn, d.worker);
    else void turn.ticket.ready.then(() => this.o.host.dispatch(turn, d.worker));
  }

  firstToken(_turn: Turn): void {}

  finished(turn: Turn, result: TurnResult): void {
    const host = this.o.host;
    const slot = this.slots.get(turn.worker as string) as Slot;
    turn.ticket?.release(
      callsTool(turn),
      callsTool(turn) ? [turn.program.requests[turn.n + 1].tool ?? null] : [],
    );
    slot.inFlight--;
    slot.inFlightPromptTokens -= turn.prepared.promptLen;
    this.leaveKv.get(turn)?.();
    this.leaveKv.delete(turn);
    // The answer's tokens: what the worker's chain of the turn holds past its prompt.
    slot.inFlightKv.answered(
      Math.max(0, result.chain.length * host.pageSize - turn.prepared.promptLen),
    );
    const s = turn.session ? this.sessions.get(turn.session) : undefined;
    const prevChain = s && s.worker === turn.worker ? s.chain : [];
    const obs = turnFinished({
      turn,
      result,
      nowMs: host.clock.nowMs(),
      pageSize: host.pageSize,
      prevChain,
      model: this.o.model,
      deviceBlocks: this.index.counters(turn.worker as string).tiers.GPU,
    });
    if (turn.session)
      this.sessions.set(turn.session, {
        worker: turn.worker,
        lastActivityMs: host.clock.nowMs(),
        chain: Array.from(result.chain),
      });
    this.observe(obs);
  }

  programEnded(program: { id: string }): void {
    if (!this.sessions.has(program.id)) return;
    this.observe({
      type: "SessionHint",
      at: this.o.host.clock.nowMs(),
      sessionId: program.id,
      event: "close",
      toolName: null,
      toolCallId: null,
      keepTokens: null,
    });
    this.sessions.delete(program.id);
  }

  commands(): Record<string, CommandCounts> {
    return this.publisher.counts;
  }
}

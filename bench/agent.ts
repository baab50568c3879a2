// Agentic workload bench (`npm run bench:agent [-- --json] [--ablation] [--runs N] [--regimes a,b]
// [--sessions N] [--gpu-sessions N] [--gpu-trace-s S] [--lanes N] [--time-scale X] [--configs a,b]
// [--seed S] [--smoke]`): BFCL
// multi-turn sessions (bench/agent/README.md) replayed through each configuration
// (bench/agent/configs.ts) against two real patched SGLang servers on CPU, the same seeded trace
// each time, servers started fresh per configuration (or, with no L3, shared by configurations of
// the same server flags and emptied by a flush between them), in two regimes:
//   saturated   time scale 1/20, file L3: tool gaps shorter than a prefill here (today's shape)
//   gpu_shaped  the time scale calibrated so the median tool gap outlasts the median returning-turn
//               prefill >= 5x, as on a GPU, and the prompt size so the trace fits --gpu-trace-s;
//               no L3; >= 32 sessions; device pools about a quarter of the active sessions' working sets
// The fair peers (cache_aware_adm, smg_adm, session_radix, sglang_mrr, thunder, and NVIDIA
// Dynamo's dynamo_kv and dynamo_thunder: bench/agent/dynamo-stack.ts) get kvctl's admission
// budget; lru, cache_aware and sgl_router are context rows outside the verdict. The
// verdict (bench/agent/verdict.ts) is refused, exit 1, when a configuration did not start, had
// errors, or served a different amount of prompt than the others.
// --smoke: one tiny saturated regime (2 sessions), kvctl and thunder (the same program admission, no command), one run.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startRealServer, type RealServer } from "../src/demo/real-server.js";
import { ablationRows, printAblation } from "./agent/ablation.js";
import {
  medianToolMs,
  plannedSpanMs,
  prefillRate,
  returningPromptTokens,
} from "./agent/calibrate.js";
import { payColdStart } from "./agent/cold-start.js";
import { type ConfigSpec, configSpecs, FAIR_PEERS, ruleOn } from "./agent/configs.js";
import { drive, type RequestRecord, sessionCompletion, type Target } from "./agent/driver.js";
import {
  flood,
  idealRecompute,
  type L3Report,
  l3Since,
  type RetentionReport,
  scrape,
  scrapeL3,
} from "./agent/measure.js";
import { Phases } from "./agent/phases.js";
import { afterRestart, type RestartReport, restartWorker } from "./agent/restart.js";
import { type DynamoPeer, type DynamoReport, startDynamoStack } from "./agent/dynamo-stack.js";
import {
  agentModel,
  removeSharedTree,
  SGLANG_ARGS,
  type ServerShape,
  startKvctlGateway,
  startNats,
  startSmg,
  startWorker,
  startWorkers,
} from "./agent/stack.js";
import {
  type ConfigSummary,
  judge,
  limits,
  type RegimeVerdict,
  type RunFigures,
  summarize,
} from "./agent/verdict.js";
import { commonExcess, type RequestExcess, requestExcess } from "./agent/common-excess.js";
import { type Family, familyShape, loadFamily } from "./agent/families.js";
import { WorkerPool } from "./agent/worker-pool.js";
import {
  type BfclWorkload,
  DEFAULT_SHAPE,
  type PlannedSession,
  planWorkload,
  type WorkloadShape,
} from "./agent/workload.js";

const argv = process.argv.slice(2);
const JSON_OUT = argv.includes("--json");
const SMOKE_DEFAULTS: Record<string, string> = argv.includes("--smoke")
  ? {
      sessions: "2",
      runs: "1",
      configs: "kvctl,thunder",
      flood: "2",
      regimes: "saturated",
      "coding-steps": "6",
      "coding-read-lines": "6",
      "coding-context": "6144",
    }
  : {};
const opt = (name: string, dflt: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : (SMOKE_DEFAULTS[name] ?? dflt);
};
const num = (name: string, dflt: string, min: number) => {
  const v = Number(opt(name, dflt));
  if (!Number.isFinite(v) || v < min)
    throw new Error(`--${name}: expected a number >= ${min}, got ${opt(name, dflt)}`);
  return v;
};
const SESSIONS = num("sessions", "16", 1);
const GPU_SESSIONS = Math.max(32, num("gpu-sessions", "32", 1));
// Runs per configuration: one run's recomputed count swings with where HiCache's evictions fall,
// so token figures read the median run and TTFT pools every run's returning turns.
const RUNS = num("runs", "3", 1);
const SEED = num("seed", "7", 0);
const TOOLS_PER_CLASS = num("tools-per-class", "5", 1);
const FLOOD = num("flood", "24", 0);
const PIN_BUDGET_SHARE = num("pin-budget-share", "0.25", 0);
/** The gpu_shaped regime's trace budget (s): the planned span it may take here, which picks its prompt size. */
const GPU_TRACE_S = num("gpu-trace-s", "240", 1);
/** The gpu_shaped regime's target: median tool gap over median returning-turn prefill time. */
const GAP_OVER_PREFILL = num("gap-over-prefill", "5", 1);
const ADMISSION_TOKENS = num("admission-tokens", "0", 0);
const ADMISSION_REQUESTS = num("admission-requests", "2", 1);
/** The median prompt (tokens) the Dynamo rows size their router queue from, instead of the one the regime's first row measured. */
const DYNAMO_MEDIAN_PROMPT = num("dynamo-median-prompt", "0", 0);
/** The workload family: BFCL multi-turn sessions, or long coding-agent sessions (coding.py). */
const WORKLOAD = opt("workload", "bfcl") as Family;
if (WORKLOAD !== "bfcl" && WORKLOAD !== "coding")
  throw new Error(`--workload: expected bfcl or coding, got ${WORKLOAD}`);
/** Coding sessions: median tool steps per session, lines per file read, context limit (tokens). */
const CODING_STEPS = num("coding-steps", "40", 1);
const CODING_READ_LINES = num("coding-read-lines", "20", 1);
const CODING_CONTEXT = num("coding-context", "24576", 1024);
const WORKERS = 2;
/** Configurations run at once, each on its own workers (their bursts coincide: the same trace). */
const LANES = num("lanes", "1", 1);
const WARM_CONFIGS = ["kvctl", "kvctl_warm", "cache_aware_adm"];
const log = (s: string) => process.stderr.write(`${s}\n`);

function loadWorkload(sessions: number, toolsPerClass = TOOLS_PER_CLASS): BfclWorkload {
  return loadFamily({
    family: WORKLOAD,
    sessions,
    seed: SEED,
    toolsPerClass,
    codingSteps: CODING_STEPS,
    codingReadLines: CODING_READ_LINES,
  });
}

/** The trace's shape: coding sessions have their own context limit and think before every step. */
function workloadShape(timeScale: number): WorkloadShape {
  return familyShape(WORKLOAD, CODING_CONTEXT, timeScale);
}

/** Device tokens per worker at least: the longest prompt the shape allows, with room for its answer. */
function deviceFloor(): number {
  const limit = workloadShape(1).contextLimitTokens;
  return Math.max(8192, Math.ceil((limit + 1024) / 16) * 16);
}

/** Compactions the planner put in the trace (before a user turn, or inside a tool loop). */
function compactions(sessions: PlannedSession[]): number {
  return sessions.reduce(
    (n, s) =>
      n +
      s.turns.reduce(
        (m, t) => m + (t.compact ? 1 : 0) + t.calls.filter((c) => c.compactBefore).length,
        0,
      ),
    0,
  );
}

interface Regime {
  name: "saturated" | "gpu_shaped" | "warm";
  workload: BfclWorkload;
  sessions: PlannedSession[];
  timeScale: number;
  shape: ServerShape;
  /** Measured prefill tokens/s and the median returning-turn prompt (null: not calibrated). */
  prefillTokensPerS: number | null;
  returningPromptTokens: number | null;
  /** Median tool gap over median returning-turn prefill time (null: not calibrated). */
  toolGapOverPrefill: number | null;
  /** The warm scenario: worker w1 restarts between the trace's two waves of sessions. */
  restart?: boolean;
  /** BFCL tools per class (the prompt size) and the planned span (s) at the time scale. */
  toolsPerClass?: number;
  plannedSpanS?: number;
}

function pinBudgetBlocks(shape: ServerShape): number {
  return Math.floor((PIN_BUDGET_SHARE * shape.deviceTokens * shape.hostRatio) / shape.pageSize);
}

/** The policy's settings for a row: the rules it names, else the defaults less those it leaves out. */
function policiesFor(spec: ConfigSpec, regime: Regime): Record<string, unknown> {
  const on = (r: string) => ruleOn(spec, r);
  const scaled = (s: number) => Math.max(1, Math.round(s / regime.timeScale));
  const { shape } = regime;
  return {
    // The gateway's view of each worker's pin budget: `--pin-budget-share` of its host pool.
    pins: { enabled: on("pins"), budgetBlocks: pinBudgetBlocks(shape) },
    inflight: { enabled: on("inflight") },
    tools: {
      enabled: on("tools"),
      priorMeanSeconds: 5 / regime.timeScale,
      prefillTokensPerSecond: regime.prefillTokensPerS ?? 2000,
    },
    think: { enabled: on("think") },
    idle: {
      enabled: on("idle"),
      leaseSeconds: scaled(300),
      deviceBlocks: Math.floor(shape.deviceTokens / shape.pageSize),
    },
    prune: { enabled: on("prune"), onClose: spec.pruneOnClose ?? true },
    warm: { enabled: on("warm"), storage: shape.storage },
  };
}

/** The gateway's admission for a configuration: the same budget per worker for every fair one. */
function admissionFor(spec: ConfigSpec, shape: ServerShape): Record<string, unknown> | undefined {
  if (spec.admission === "none") return undefined;
  if (spec.admission === "program") {
    return {
      mode: "program",
      maxRequestsPerWorker: ADMISSION_REQUESTS,
      capacityTokensPerWorker: shape.deviceTokens * (1 + shape.hostRatio),
    };
  }
  return ADMISSION_TOKENS > 0
    ? { maxPromptTokensPerWorker: ADMISSION_TOKENS }
    : { maxRequestsPerWorker: ADMISSION_REQUESTS };
}

interface RunExtra {
  host_hit_tokens: number;
  storage_hit_tokens: number;
  /** null: the workers serve no /metrics (Dynamo's). */
  l3: L3Report | null;
  flood_served: string;
  /** Prompts the floor's tokenization counted to another length than the worker served. */
  ideal_mismatched: number | null;
  /** Whether the worker returned every answer's generated ids, so the floor credits them exactly (null: no floor). */
  ideal_exact: boolean | null;
  /** Requests this run served more of from cache than its ideal floor allows (a floor that is not one). */
  ideal_undercut: number | null;
  pin_budget_peak_blocks: number | null;
  pinned_blocks_hit: number | null;
  pinned_blocks_wasted: number | null;
  /** Program admission's retention decisions, outcomes and gaps (null: no gateway). */
  retention: RetentionReport | null;
  /** The warm scenario's restart and what the restarted worker served after it. */
  restart: RestartReport | null;
  /** The Dynamo rows: their router queue threshold and ThunderAgent's programs. */
  dynamo: DynamoReport | null;
  wall_s: number;
  /** Seconds per phase of the run (server start, trace, flood, ...). */
  phases_s: Record<string, number>;
}
interface RunOut {
  figures: RunFigures;
  extra: RunExtra;
  /** Each request's tokens recomputed beyond the ideal cache (null: no floor computed). */
  excess: RequestExcess | null;
}

/** Each request's timing beside the decision log (what a slow session spent its time on); prompts left out. */
function writeRequestTrace(path: string, records: readonly RequestRecord[]): void {
  writeFileSync(
    path,
    records.map(({ prompt: _prompt, ...r }) => JSON.stringify(r)).join("\n") + "\n",
  );
}

/** Closes a session on every worker (SGLang's session radix cache releases its tagged nodes). */
const closeOn = (workers: RealServer[]) => async (id: string) => {
  await Promise.all(
    workers.map(async (w) => {
      const r = await fetch(`${w.baseUrl}/close_session`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ session_id: id }),
      });
      await r.text();
    }),
  );
};

/** Ends a session through the gateway's events route (its policy and its radix sessions hear it). */
const closeThrough = (gatewayUrl: string) => async (id: string) => {
  const r = await fetch(`${gatewayUrl}/kvctl/v1/sessions/${encodeURIComponent(id)}/events`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ event: "close" }),
  });
  await r.text();
};

async function frontFor(
  spec: ConfigSpec,
  regime: Regime,
  workers: RealServer[],
  nats: { url: string } | null,
  scratch: string,
  trace: string | null,
  cleanup: (() => Promise<void>)[],
): Promise<{ target: Target; metricsUrl: string | null }> {
  const close = spec.sessionBody ? { sessionBody: true, closeSession: closeOn(workers) } : {};
  if (spec.front === "round_robin")
    return {
      target: {
        name: spec.name,
        url: (seq) => workers[seq % workers.length].baseUrl,
        sessionHeader: false,
      },
      metricsUrl: null,
    };
  if (spec.front === "smg") {
    const smg = await startSmg(workers, join(scratch, "smg.log"), spec.smgArgs ?? []);
    cleanup.push(() => smg.stop());
    return {
      target: { name: spec.name, url: () => smg.url, sessionHeader: false },
      metricsUrl: null,
    };
  }
  const agent = spec.policy === "agent";
  const decisions = trace ? `${trace}.decisions.jsonl` : undefined;
  const natsLike = nats as Parameters<typeof startKvctlGateway>[1];
  const g = await startKvctlGateway(
    workers,
    natsLike,
    spec.policy,
    agent ? policiesFor(spec, regime) : undefined,
    admissionFor(spec, regime.shape),
    Math.max(0.05, 10 / regime.timeScale),
    decisions,
  );
  cleanup.push(() => g.close());
  // kvctl hears a session's end from the harness (the events route), as the peers' workers do through close_session.
  const ends = agent && !spec.sessionBody ? { closeSession: closeThrough(g.url) } : {};
  return {
    target: { name: spec.name, url: () => g.url, sessionHeader: true, ...close, ...ends },
    metricsUrl: g.url,
  };
}

/** Which configurations may run on one another's workers (flushed between them): the same server
 * flags, no kvctl subscriber (it is bound to its run's NATS) and no L3 (a flush leaves it full).
 * null: fresh workers. */
function shareKey(spec: ConfigSpec, regime: Regime): string | null {
  if (
    spec.policy === "agent" ||
    spec.front === "dynamo_kv" ||
    spec.front === "dynamo_thunder" ||
    regime.shape.storage ||
    regime.restart
  )
    return null;
  return spec.serverArgs.join(" ");
}

/** `<KVCTL_BENCH_TRACE>.<regime>.<config>.run<n>`, the prefix of one run's trace files (null: not tracing). */
function tracePrefix(regime: string, config: string, run: number): string | null {
  const base = process.env.KVCTL_BENCH_TRACE;
  return base ? `${base}.${regime}.${config}.run${run}` : null;
}

/** A regime's figures its rows share while it runs: the trace's median prompt (tokens), measured
 * by the first row that serves it, which the Dynamo rows size their router queue from. */
interface RegimeRun {
  regime: Regime;
  medianPrompt: number | null;
}

/** The front a run's requests go through, the workers behind it, and what it reports. */
interface Started {
  workers: RealServer[];
  front: { target: Target; metricsUrl: string | null };
  dynamoReport: (() => DynamoReport) | null;
  l3Before: L3Report | null;
}

/** One run (`run`: its number, from 1) of one configuration. */
async function runConfig(
  spec: ConfigSpec,
  rr: RegimeRun,
  pool: WorkerPool,
  run: number,
): Promise<RunOut> {
  const { regime } = rr;
  const t0 = performance.now();
  const trace = tracePrefix(regime.name, spec.name, run);
  const ph = new Phases(spec.name, log);
  const scratch = mkdtempSync(join(tmpdir(), `kvctl-agent-${spec.name}-`));
  const cleanup: (() => Promise<void>)[] = [];
  const ranToEnd = { value: false };
  try {
    const nats = spec.policy === "agent" ? await startNats(join(scratch, "js")) : null;
    if (nats) cleanup.push(() => nats.stop());
    // The warm scenario: both workers on one L3 directory (what one backed up, the other can read).
    const shape: ServerShape = regime.restart
      ? { ...regime.shape, sharedStorageDir: join(scratch, "l3") }
      : regime.shape;
    const st =
      spec.front === "dynamo_kv" || spec.front === "dynamo_thunder"
        ? await startDynamoFront(spec, rr, shape, scratch, cleanup, ph)
        : await startGatewayFront(spec, regime, shape, pool, { nats, scratch, trace }, cleanup, {
            ph,
            ranToEnd,
          });
    const { target } = st.front;
    // The served model's name (a peer router routes on it).
    const model = (
      (await (await fetch(`${st.workers[0]?.baseUrl ?? target.url(0)}/v1/models`)).json()) as {
        data: { id: string }[];
      }
    ).data[0].id;
    const { records, restarted } = await runTrace(spec, regime, shape, st, nats, model);
    ph.mark("trace");
    if (records.every((r) => !r.ok))
      throw new Error(`every request failed, first: ${records[0]?.error}`);
    const out = await measureRun(spec, rr, st, records, model, trace, ph);
    out.extra.restart = restarted;
    out.extra.wall_s = +((performance.now() - t0) / 1000).toFixed(1);
    ranToEnd.value = true;
    return out;
  } finally {
    for (const c of cleanup.reverse())
      await c().catch((e) => log(`  ${spec.name}: cleanup: ${(e as Error).message}`));
    rmSync(scratch, { recursive: true, force: true });
    ph.mark("stop");
  }
}

/** Dynamo's workers serve no HTTP: requests, usage and the flood all go through its frontend. */
async function startDynamoFront(
  spec: ConfigSpec,
  rr: RegimeRun,
  shape: ServerShape,
  scratch: string,
  cleanup: (() => Promise<void>)[],
  ph: Phases,
): Promise<Started> {
  const median = DYNAMO_MEDIAN_PROMPT > 0 ? DYNAMO_MEDIAN_PROMPT : rr.medianPrompt;
  if (median === null)
    throw new Error(
      `${spec.name} sets its router queue from the trace's median prompt: run it after a row that measures it, or give --dynamo-median-prompt`,
    );
  const d = await startDynamoStack(spec.front.slice("dynamo_".length) as DynamoPeer, {
    shape,
    sglangArgs: SGLANG_ARGS,
    perWorker: ADMISSION_REQUESTS,
    medianPromptTokens: median,
    scratch,
    log,
  });
  cleanup.push(() => d.stop());
  ph.mark("dynamo start");
  return {
    workers: [],
    front: { target: d.target, metricsUrl: null },
    dynamoReport: d.report,
    l3Before: null,
  };
}

/** The workers (fresh, or flushed from the pool) and the front before them, cold start paid. */
async function startGatewayFront(
  spec: ConfigSpec,
  regime: Regime,
  shape: ServerShape,
  pool: WorkerPool,
  at: { nats: { url: string } | null; scratch: string; trace: string | null },
  cleanup: (() => Promise<void>)[],
  run: { ph: Phases; ranToEnd: { value: boolean } },
): Promise<Started> {
  const { ph } = run;
  const key = shareKey(spec, regime);
  const taken = await pool.take(key, () => startWorkers(shape, spec.serverArgs, at.nats?.url));
  const workers = taken.workers;
  cleanup.push(() => pool.give(key, workers, run.ranToEnd.value));
  ph.mark(taken.reused ? "workers flushed" : "workers start");
  const l3Before = await scrapeL3(workers);
  const front = await frontFor(spec, regime, workers, at.nats, at.scratch, at.trace, cleanup);
  ph.mark("front start");
  // After the front is up (its KV-event subscriber listening), before anything is timed.
  await payColdStart(workers, shape.pageSize);
  ph.mark("cold start");
  return { workers, front, dynamoReport: null, l3Before };
}

/** The trace through the front; the warm scenario restarts w1 between its two waves. */
async function runTrace(
  spec: ConfigSpec,
  regime: Regime,
  shape: ServerShape,
  st: Started,
  nats: { url: string } | null,
  model: string,
): Promise<{ records: RequestRecord[]; restarted: RestartReport | null }> {
  const { target, metricsUrl } = st.front;
  const { workers } = st;
  const o = { system: regime.workload.system_prompt, model, maxTokens: 1024 };
  if (!regime.restart || !metricsUrl)
    return { records: await drive(target, regime.sessions, o), restarted: null };
  // The warm scenario: the first half of the sessions, w1 restarted in place, then the rest.
  const half = Math.ceil(regime.sessions.length / 2);
  const wave1 = await drive(target, regime.sessions.slice(0, half), o);
  const r = await restartWorker(workers, 1, metricsUrl, (place) =>
    startWorker(shape, spec.serverArgs, nats?.url, "w1", place),
  );
  await payColdStart([workers[1]], shape.pageSize);
  const wave2 = await drive(target, regime.sessions.slice(half), o);
  return { records: [...wave1, ...wave2], restarted: afterRestart(wave2, r) };
}

/** After the trace: the L3 and flood figures, the front's metrics and the ideal floor. */
async function measureRun(
  spec: ConfigSpec,
  rr: RegimeRun,
  st: Started,
  records: RequestRecord[],
  model: string,
  trace: string | null,
  ph: Phases,
): Promise<RunOut> {
  const { workers } = st;
  const { target, metricsUrl } = st.front;
  const l3 = workers.length && st.l3Before ? l3Since(await scrapeL3(workers), st.l3Before) : null;
  const served = await flood(target.url(0), FLOOD, model, SEED);
  ph.mark("flood");
  const scraped = metricsUrl ? await scrape(metricsUrl) : null;
  const ok = records.filter((r) => r.ok);
  const errs = records.filter((r) => !r.ok);
  if (errs.length) log(`  ${spec.name}: ${errs.length} failed requests, first: ${errs[0].error}`);
  // The ideal floor of this run's own prompts needs a worker to tokenize: computed now, before the workers stop.
  const floor = workers.length
    ? await idealRecompute(records, workers[0].baseUrl, model, rr.regime.shape.pageSize)
    : null;
  if (floor) ph.mark("ideal floor");
  // Written once the floor is known, so each record carries what an ideal cache would have served.
  if (trace) writeRequestTrace(`${trace}.requests.jsonl`, records);
  if (rr.medianPrompt === null && ok.length)
    rr.medianPrompt = median(ok.map((r) => r.promptTokens));
  return {
    figures: figuresOf(records, floor, scraped, served),
    extra: {
      ideal_mismatched: floor?.mismatched ?? null,
      ideal_exact: floor ? floor.exact === floor.served : null,
      ideal_undercut: floor?.undercut ?? null,
      host_hit_tokens: ok.reduce((n, r) => n + r.hostTokens, 0),
      storage_hit_tokens: ok.reduce((n, r) => n + r.storageTokens, 0),
      l3,
      flood_served: `${served}/${FLOOD}`,
      restart: null,
      dynamo: st.dynamoReport?.() ?? null,
      pin_budget_peak_blocks: scraped ? scraped.pinPeak : null,
      pinned_blocks_hit: scraped ? scraped.pinned.hit : null,
      pinned_blocks_wasted: scraped ? scraped.pinned.wasted : null,
      retention: scraped?.retention ?? null,
      wall_s: 0,
      phases_s: ph.s,
    },
    excess: floor ? requestExcess(records) : null,
  };
}

/** The figures the verdict reads from one run. */
function figuresOf(
  records: RequestRecord[],
  floor: Awaited<ReturnType<typeof idealRecompute>> | null,
  scraped: Awaited<ReturnType<typeof scrape>> | null,
  served: number,
): RunFigures {
  const ok = records.filter((r) => r.ok);
  const prompt = ok.reduce((n, r) => n + r.promptTokens, 0);
  const cached = ok.reduce((n, r) => n + r.cachedTokens, 0);
  return {
    recomputed_tokens: prompt - cached,
    prompt_tokens: prompt,
    errors: records.length - ok.length,
    ideal_recomputed: floor?.recomputed ?? null,
    ttft_returning: ok.filter((r) => r.returning).map((r) => r.ttftMs),
    session_completion: sessionCompletion(records),
    commands: scraped?.commands ?? null,
    pin_peak_blocks: scraped ? scraped.pinPeak : null,
    flood_unserved: FLOOD - served,
  };
}

/** Why a configuration did not run: the error's first line and, when it quotes a server's log,
 * that log's last line (the exception that stopped the server, say SGLang's host-memory check). */
function failure(e: Error): string {
  const lines = e.message.split("\n").filter((l) => l.trim() !== "");
  const last = lines.length > 1 ? lines[lines.length - 1].trim() : "";
  return `${lines[0] ?? String(e)}${last ? ` ... ${last}` : ""}`;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[(xs.length - 1) >> 1];

/** N servers started at once; all stopped when one fails to start. */
async function startWorkersN(
  n: number,
  start: (i: number) => Promise<RealServer>,
): Promise<RealServer[]> {
  const settled = await Promise.allSettled(Array.from({ length: n }, (_, i) => start(i)));
  const ok = settled.flatMap((x) => (x.status === "fulfilled" ? [x.value] : []));
  const failed = settled.find((x) => x.status === "rejected") as PromiseRejectedResult | undefined;
  if (failed) {
    await Promise.all(ok.map((w) => w.stop()));
    throw failed.reason;
  }
  return ok;
}

function saturatedRegime(model: string, sessions = SESSIONS): Regime {
  const timeScale = num("time-scale", String(DEFAULT_SHAPE.timeScale), 0.001);
  const workload = loadWorkload(sessions);
  const shape: ServerShape = {
    model,
    pageSize: 16,
    deviceTokens: Math.max(deviceFloor(), num("device-tokens", "8192", 16)),
    hostRatio: 2,
    storage: true,
  };
  return {
    name: "saturated",
    workload,
    sessions: planWorkload(workload, workloadShape(timeScale), SEED),
    timeScale,
    shape,
    prefillTokensPerS: null,
    returningPromptTokens: null,
    toolGapOverPrefill: null,
  };
}

/**
 * The warm scenario: the saturated shape (file L3), one L3 directory for both workers, and worker
 * w1 restarted between two waves of sessions, so the warm rule has a cold worker to warm.
 */
function warmRegime(model: string): Regime {
  const r = saturatedRegime(model, num("warm-sessions", "16", 1));
  return { ...r, name: "warm", restart: true };
}

/**
 * The gpu_shaped regime: one worker of the bench's model measures this machine's prefill rate on
 * prompts the size of the median returning turn; the time scale is chosen so that the median tool
 * gap is GAP_OVER_PREFILL times that prefill; each worker's device pool holds about a quarter of
 * the working sets of the sessions it serves (but at least the longest prompt), no L3. The same
 * probe gives `other` (the saturated regime, when it runs too) its own tool gap / prefill ratio.
 */
async function gpuShapedRegime(model: string, other: Regime | null): Promise<Regime> {
  const ph = new Phases("gpu_shaped calibration", log);
  // One probe per lane, prefilling at once: with --lanes N the configurations' bursts coincide (they
  // replay the same trace), so the prefill a lane gets is the one measured beside N-1 others.
  const probes = await startWorkersN(LANES, (i) =>
    startRealServer({
      model,
      workerId: `calibrate${i}`,
      pageSize: 16,
      maxTotalTokens: 32768,
      hostRatio: 2,
      warmup: false,
      storageDir: "",
      extraArgs: ["--context-length", "32768"],
      readyTimeoutS: 600,
    }),
  );
  ph.mark("probe start");
  let pick: GpuCalibration;
  try {
    const served = (
      (await (await fetch(`${probes[0].baseUrl}/v1/models`)).json()) as { data: { id: string }[] }
    ).data[0].id;
    const probe: Probe = {
      url: probes[0].baseUrl,
      served,
      rate: async (system, tokens) =>
        median(
          await Promise.all(probes.map((p) => prefillRate(p.baseUrl, served, system, tokens))),
        ),
    };
    pick = await pickPromptSize(probe);
    ph.mark("prompt sizes and prefill rates");
    if (other) {
      await calibrateOther(probe, other);
      ph.mark("saturated prefill rate");
    }
  } finally {
    await Promise.all(probes.map((p) => p.stop()));
    ph.mark("probe stop");
  }
  return gpuRegimeOf(model, pick);
}

/** A calibration worker: its URL, the model it serves, and the prefill rate measured on every probe at once. */
interface Probe {
  url: string;
  served: string;
  rate: (system: string, tokens: number) => Promise<number>;
}

/**
 * Prompt sizes, largest first: the BFCL tool schemas are most of a prompt, so fewer tools per
 * class is a smaller prompt (coding sessions have one size). The first whose planned span fits
 * GPU_TRACE_S is taken; when none does, the one with the shortest span.
 */
async function pickPromptSize(probe: Probe): Promise<GpuCalibration> {
  const sizes =
    WORKLOAD === "bfcl"
      ? Array.from({ length: TOOLS_PER_CLASS }, (_, i) => TOOLS_PER_CLASS - i)
      : [TOOLS_PER_CLASS];
  let pick: GpuCalibration | null = null;
  for (const toolsPerClass of sizes) {
    const workload = loadWorkload(GPU_SESSIONS, toolsPerClass);
    const unscaled = planWorkload(workload, workloadShape(1), SEED);
    const promptTokens = await returningPromptTokens(
      probe.url,
      probe.served,
      workload.system_prompt,
      unscaled,
    );
    const rate = await probe.rate(workload.system_prompt, promptTokens);
    const prefillMs = (promptTokens / rate) * 1000;
    const timeScale = +(medianToolMs(unscaled) / (GAP_OVER_PREFILL * prefillMs)).toPrecision(3);
    const spanS = +(plannedSpanMs(unscaled) / timeScale / 1000).toFixed(1);
    const c: GpuCalibration = {
      toolsPerClass,
      workload,
      unscaled,
      promptTokens,
      rate,
      prefillMs,
      timeScale,
      spanS,
    };
    log(
      `   gpu_shaped prompt size: ${WORKLOAD === "bfcl" ? `${toolsPerClass} tools per class, ` : ""}median returning-turn prompt ${promptTokens} tokens, ` +
        `prefill ${rate.toFixed(0)} tokens/s (${prefillMs.toFixed(0)} ms) -> time scale ${timeScale}, planned span ${spanS} s (budget ${GPU_TRACE_S} s)`,
    );
    if (!pick || spanS < pick.spanS) pick = c;
    if (spanS <= GPU_TRACE_S) return c;
  }
  return pick as GpuCalibration;
}

/** The same probe gives the other regime its own prefill rate and tool gap / prefill ratio. */
async function calibrateOther(probe: Probe, other: Regime): Promise<void> {
  const t = await returningPromptTokens(
    probe.url,
    probe.served,
    other.workload.system_prompt,
    other.sessions,
  );
  const r = await probe.rate(other.workload.system_prompt, t);
  Object.assign(other, {
    prefillTokensPerS: +r.toFixed(1),
    returningPromptTokens: t,
    toolGapOverPrefill: +(medianToolMs(other.sessions) / ((t / r) * 1000)).toFixed(2),
  });
}

/** The gpu_shaped regime at the picked prompt size: each worker's device pool about a quarter of
 * its sessions' working sets (at least the longest prompt), no L3. */
function gpuRegimeOf(model: string, pick: GpuCalibration): Regime {
  const { toolsPerClass, workload, unscaled, promptTokens, rate, prefillMs, timeScale, spanS } =
    pick;
  const sessions = planWorkload(workload, workloadShape(timeScale), SEED);
  const perWorker = Math.ceil(sessions.length / WORKERS);
  const deviceTokens = Math.max(
    deviceFloor(),
    Math.ceil((0.25 * perWorker * promptTokens) / 16) * 16,
  );
  const shape: ServerShape = { model, pageSize: 16, deviceTokens, hostRatio: 2, storage: false };
  log(
    `gpu_shaped calibration: prefill ${rate.toFixed(0)} tokens/s on the median returning-turn prompt of ${promptTokens} tokens (${prefillMs.toFixed(0)} ms); ` +
      `median tool gap ${medianToolMs(unscaled)} ms unscaled -> time scale ${timeScale} (tool gap / prefill = ${(medianToolMs(sessions) / prefillMs).toFixed(1)}); ` +
      `planned span ${spanS} s; device pool ${deviceTokens} tokens per worker`,
  );
  return {
    name: "gpu_shaped",
    workload,
    sessions,
    timeScale,
    shape,
    prefillTokensPerS: +rate.toFixed(1),
    returningPromptTokens: promptTokens,
    toolGapOverPrefill: +(medianToolMs(sessions) / prefillMs).toFixed(2),
    toolsPerClass,
    plannedSpanS: spanS,
  };
}

/** One prompt size the gpu_shaped calibration tried. */
interface GpuCalibration {
  toolsPerClass: number;
  workload: BfclWorkload;
  unscaled: PlannedSession[];
  promptTokens: number;
  rate: number;
  prefillMs: number;
  timeScale: number;
  /** The trace's planned span at that time scale (arrivals, tool and human gaps; no compute). */
  spanS: number;
}

interface RegimeResult {
  regime: Regime;
  configs: Record<string, (ConfigSummary & { role: string; extra: RunExtra }) | null>;
  notRun: Record<string, string>;
  verdict: RegimeVerdict;
  /** The ideal floor plus what every run of every configuration recomputed beyond it, and the gap-closed shares against that. */
  attainable: { recomputed: number; verdict: RegimeVerdict } | null;
  wallS: number;
}

async function runRegime(regime: Regime, specs: ConfigSpec[]): Promise<RegimeResult> {
  const t0 = performance.now();
  const turns = regime.workload.sessions.reduce((n, s) => n + s.turns.length, 0);
  const calls = regime.sessions.reduce(
    (n, s) => n + s.turns.reduce((m, t) => m + t.calls.length, 0),
    0,
  );
  log(
    `== ${regime.name}: ${regime.sessions.length} ${WORKLOAD} sessions (seed ${SEED}), ${turns} user turns, ${calls} tool calls, ${compactions(regime.sessions)} compactions; time scale 1/${regime.timeScale}; ` +
      `${WORKERS} workers x ${regime.shape.deviceTokens} device tokens, host ratio ${regime.shape.hostRatio}, ${regime.shape.storage ? "file L3" : "no L3"}; ` +
      `admission budget ${ADMISSION_REQUESTS} requests per worker (${ADMISSION_REQUESTS * WORKERS} in all)`,
  );
  const rr: RegimeRun = { regime, medianPrompt: null };
  const perRun: Record<string, RunOut[]> = Object.fromEntries(specs.map((s) => [s.name, []]));
  const notRun: Record<string, string> = {};
  await Promise.all(lanesOf(regime, specs).map((mine) => runLane(rr, mine, perRun, notRun)));
  const configs = summaries(specs, perRun, notRun);
  const judged = Object.fromEntries(
    Object.entries(configs).filter(([n]) => specs.find((s) => s.name === n)?.role !== "ablation"),
  );
  const floor = regimeFloor(configs);
  const verdict = judge(judged, notRun, FAIR_PEERS(specs), "thunder", floor);
  const common = commonExcess(Object.values(perRun).flatMap((rs) => rs.map((r) => r.excess)));
  const attainable =
    floor !== null && common !== null
      ? {
          recomputed: floor + common,
          verdict: judge(judged, notRun, FAIR_PEERS(specs), "thunder", floor + common),
        }
      : null;
  return {
    regime,
    configs,
    notRun,
    verdict,
    attainable,
    wallS: +((performance.now() - t0) / 1000).toFixed(1),
  };
}

/**
 * Rounds, not one configuration's runs back to back: every configuration sees the machine's drift
 * alike. Configurations that can share workers run one after the other (first appearance order);
 * with --lanes N, lane i runs the configurations i, i+N, ... of each round, on its own workers.
 */
function lanesOf(regime: Regime, specs: ConfigSpec[]): ConfigSpec[][] {
  const keys = [...new Set(specs.map((s) => shareKey(s, regime) ?? `fresh:${s.name}`))];
  const order = [...specs].sort(
    (a, b) =>
      keys.indexOf(shareKey(a, regime) ?? `fresh:${a.name}`) -
      keys.indexOf(shareKey(b, regime) ?? `fresh:${b.name}`),
  );
  return Array.from({ length: Math.min(LANES, order.length) }, (_, i) =>
    order.filter((_, k) => k % LANES === i),
  );
}

/** Every round of one lane's configurations; a configuration that fails is not run again. */
async function runLane(
  rr: RegimeRun,
  mine: ConfigSpec[],
  perRun: Record<string, RunOut[]>,
  notRun: Record<string, string>,
): Promise<void> {
  const pool = new WorkerPool(log);
  try {
    for (let round = 0; round < RUNS; round++) {
      for (const spec of mine) {
        if (notRun[spec.name]) continue;
        log(`-- ${rr.regime.name} ${spec.name}${RUNS > 1 ? ` (run ${round + 1}/${RUNS})` : ""}`);
        try {
          const r = await runConfig(spec, rr, pool, round + 1);
          perRun[spec.name].push(r);
          log(runLine(spec.name, r));
        } catch (e) {
          notRun[spec.name] = failure(e as Error);
          // The whole message (a worker's last log lines) goes to the log; the table keeps one line.
          log(`   ${spec.name} did not run: ${(e as Error).message.split("\n").join("\n     ")}`);
        }
      }
    }
  } finally {
    await pool.drop();
  }
}

/** One run's figures in one log line. */
function runLine(name: string, r: RunOut): string {
  const t = summarize([r.figures]).ttft_returning_ms;
  const floor =
    r.figures.ideal_recomputed !== null
      ? `; ideal floor ${r.figures.ideal_recomputed}${r.extra.ideal_exact ? "" : " (answers credited whole)"}${r.extra.ideal_undercut ? `, ${r.extra.ideal_undercut} requests under it` : ""}`
      : "";
  const commands = r.figures.commands
    ? `; commands ${
        Object.entries(r.figures.commands)
          .map(([k, n]) => `${k}=${n}`)
          .join(" ") || "none"
      }`
    : "";
  return (
    `   ${name}: recomputed ${r.figures.recomputed_tokens} of ${r.figures.prompt_tokens}, errors ${r.figures.errors}, returning TTFT p50/p90/p99 ${t.p50}/${t.p90}/${t.p99} ms, wall ${r.extra.wall_s} s` +
    floor +
    commands
  );
}

/** Each configuration's runs summarized, with the median run's extras (null: it did not run). */
function summaries(
  specs: ConfigSpec[],
  perRun: Record<string, RunOut[]>,
  notRun: Record<string, string>,
): RegimeResult["configs"] {
  const configs: RegimeResult["configs"] = {};
  for (const s of specs) {
    const runs = perRun[s.name];
    if (notRun[s.name] || runs.length === 0) {
      configs[s.name] = null;
      continue;
    }
    const sum = summarize(runs.map((r) => r.figures));
    const mid = [...runs].sort((a, b) => a.figures.recomputed_tokens - b.figures.recomputed_tokens)[
      (runs.length - 1) >> 1
    ];
    configs[s.name] = { role: s.role, ...sum, extra: mid.extra };
  }
  return configs;
}

/** The regime's ideal floor: the lowest of its configurations' own floors (each tokenized its own
 * run's prompts), so a gap-closed share never flatters anyone. Floors that credit the generated
 * answers exactly are preferred: one whose front returned no generated ids (Dynamo's) credits every
 * generated token, a bound no cache reaches where the template drops the reasoning. */
function regimeFloor(configs: RegimeResult["configs"]): number | null {
  const all = Object.values(configs).flatMap((c) => (c && c.ideal_recomputed !== null ? [c] : []));
  const exact = all.filter((c) => c.extra.ideal_exact);
  const floors = (exact.length ? exact : all).map((c) => c.ideal_recomputed as number);
  return floors.length ? Math.min(...floors) : null;
}

const f = (x: number | null | undefined, d = 0) =>
  x === null || x === undefined ? "-" : x.toFixed(d);

function printRegime(r: RegimeResult): void {
  const { regime, configs } = r;
  console.log(
    `${regime.name}: ${regime.sessions.length} ${WORKLOAD} sessions (${compactions(regime.sessions)} compactions), time scale 1/${regime.timeScale}, ${RUNS} run(s) per configuration, ${regime.shape.deviceTokens} device tokens per worker, ` +
      `${regime.shape.storage ? "file L3" : "no L3"}; regime wall ${r.wallS} s`,
  );
  if (regime.prefillTokensPerS !== null)
    console.log(
      `  prefill ${regime.prefillTokensPerS} tokens/s, median returning-turn prompt ${regime.returningPromptTokens} tokens, median tool gap / prefill = ${regime.toolGapOverPrefill}`,
    );
  console.log(
    `  ${WORKLOAD === "bfcl" ? `${regime.toolsPerClass ?? TOOLS_PER_CLASS} tools per class, ` : ""}planned span ${(plannedSpanMs(regime.sessions) / 1000).toFixed(1)} s (arrivals, tool and human gaps; no compute)`,
  );
  printTable(r);
  printFloors(r);
  const lim = limits(configs, pinBudgetBlocks(regime.shape));
  console.log(
    `  pin budget ${lim.pin_budget_blocks} blocks per worker: peak ${f(lim.pin_peak_blocks)} over every run (bar never exceeded: ${lim.pin_budget_kept ? "PASS" : "FAIL"}); ` +
      `flood after the trace served in full: ${lim.flood_served_in_full ? "PASS" : "FAIL"}${lim.broken.length ? ` (${lim.broken.join("; ")})` : ""}`,
  );
  printAblation(ablationRows(configs), (l) => console.log(l));
  printExtras(configs);
  printVerdict(r);
}

/** One row per configuration: tokens, gap closed, returning TTFT, session time, errors, commands. */
function printTable(r: RegimeResult): void {
  console.log(
    "  config           role      prompt tok  recomputed  gap closed  TTFT ret p50/p90/p99 ms  session s mean/p90  errors  wall s  commands",
  );
  for (const [name, c] of Object.entries(r.configs)) {
    if (!c) {
      console.log(`  ${name.padEnd(16)} did not run: ${r.notRun[name]}`);
      continue;
    }
    const cmds = c.commands
      ? Object.entries(c.commands)
          .map(([k, n]) => `${k}=${n}`)
          .join(" ")
      : "-";
    const t = c.ttft_returning_ms;
    console.log(
      `  ${name.padEnd(16)} ${c.role.padEnd(8)} ${String(c.prompt_tokens).padStart(11)}  ${String(c.recomputed_tokens).padStart(10)}  ${f(r.verdict.gap_closed[name], 2).padStart(10)}  ` +
        `${`${f(t.p50)}/${f(t.p90)}/${f(t.p99)}`.padStart(23)}  ${`${f(c.session_completion_s.mean, 1)}/${f(c.session_completion_s.p90, 1)}`.padStart(18)}  ${String(c.errors).padStart(6)}  ${String(c.extra.wall_s).padStart(6)}  ${cmds}`,
    );
  }
}

/** The ideal floor and the attainable one, with what kvctl closed against the latter. */
function printFloors(r: RegimeResult): void {
  const { regime, configs } = r;
  const floor = regimeFloor(configs);
  if (floor === null) return;
  const all = Object.values(configs);
  const mismatched = all.reduce((n, c) => n + (c?.extra.ideal_mismatched ?? 0), 0);
  const undercut = all.reduce((n, c) => n + (c?.extra.ideal_undercut ?? 0), 0);
  const exact = all.some((c) => c?.extra.ideal_exact);
  console.log(
    `  ideal cache (every earlier prompt and ${exact ? "the ids its answer generated" : "every token its answer generated"} kept, page ${regime.shape.pageSize}): ${floor} recomputed tokens ` +
      `(the lowest configuration's own floor)${mismatched ? `; ${mismatched} prompts tokenized to another length than served` : ""}` +
      `${undercut ? `; ${undercut} requests served more from cache than the median runs' floors allow` : ""}`,
  );
  if (!r.attainable) return;
  const a = r.attainable;
  console.log(
    `  attainable floor ${a.recomputed}: the ideal floor plus the ${a.recomputed - floor} tokens every run of every configuration recomputed beyond it, request by request ` +
      `(${exact ? "" : "answer pages the template renders differently from how they were generated, and "}any miss no configuration here avoided); kvctl's gap closed against it: ` +
      `${
        Object.entries(a.verdict.gap_closed)
          .map(([n, g]) => `${n} ${f(g, 2)}`)
          .join(", ") || "-"
      }`,
  );
}

/** The warm scenario's restarts, program admission's retention and the Dynamo rows' settings. */
function printExtras(configs: RegimeResult["configs"]): void {
  const kv = (o: Record<string, number>) =>
    Object.entries(o)
      .map(([k, n]) => `${k}=${n}`)
      .join(" ") || "none";
  for (const [name, c] of Object.entries(configs)) {
    const rs = c?.extra.restart;
    if (!rs) continue;
    const warmCmds =
      Object.entries(c?.commands ?? {})
        .filter(([k]) => k.startsWith("Warm:"))
        .map(([k, n]) => `${k}=${n}`)
        .join(" ") || "no Warm command";
    console.log(
      `  restart ${name}: ${rs.worker} out of rotation ${rs.out_s} s; its second-wave requests: ${rs.after.requests}, ${rs.after.prompt_tokens} prompt tokens, ` +
        `${rs.after.recomputed_tokens} recomputed, ${rs.after.storage_hit_tokens} from L3, ${rs.after.host_hit_tokens} from host; ${warmCmds}`,
    );
  }
  for (const [name, c] of Object.entries(configs)) {
    const rt = c?.extra.retention;
    if (
      !rt ||
      (Object.keys(rt.decisions).length === 0 && Object.keys(rt.radix_releases).length === 0)
    )
      continue;
    console.log(
      `  retention ${name} (median run): decisions ${kv(rt.decisions)}; outcomes ${kv(rt.outcomes)}; tool gap predicted ${f(rt.gap_predicted.mean_s, 2)} s mean ` +
        `(${rt.gap_predicted.count}), actual ${f(rt.gap_actual.mean_s, 2)} s (${rt.gap_actual.count}); radix sessions closed ${kv(rt.radix_releases)}`,
    );
  }
  for (const [name, c] of Object.entries(configs)) {
    const d = c?.extra.dynamo;
    if (d)
      console.log(
        `  ${name}: Dynamo router queue threshold ${d.router_queue_threshold}${d.thunder_programs === null ? "" : `, ThunderAgent programs created ${d.thunder_programs}`}`,
      );
  }
}

function printVerdict(r: RegimeResult): void {
  const { configs, verdict } = r;
  if (!verdict.valid) {
    console.log(`  NO VERDICT: the comparison is not a fair one: ${verdict.problems.join("; ")}`);
    return;
  }
  const k = configs.kvctl as ConfigSummary;
  const best = verdict.best_fair_peer ? (configs[verdict.best_fair_peer] as ConfigSummary) : null;
  const x = best ? best.recomputed_tokens / Math.max(1, k.recomputed_tokens) : null;
  const ttft = verdict.ttft_p90_ratio_vs_best_fair;
  console.log(
    `  best fair peer: ${verdict.best_fair_peer}; kvctl recomputes ${f(x, 2)}x fewer (bar >= 1.5x: ${x !== null && x >= 1.5 ? "PASS" : "FAIL"}), ` +
      `gap closed ${f(verdict.gap_closed_vs_best_fair, 2)}, returning-turn TTFT p90 ${f(ttft, 2)}x of it (bar < 1: ${ttft !== null && ttft < 1 ? "PASS" : "FAIL"}), ` +
      `${f(verdict.ttft_p90_ratio_vs_admission_only, 2)}x of admission alone (thunder)`,
  );
}

function regimeJson(r: RegimeResult): Record<string, unknown> {
  const v = r.verdict;
  return {
    workload: WORKLOAD,
    sessions: r.regime.sessions.length,
    compactions: compactions(r.regime.sessions),
    time_scale: r.regime.timeScale,
    device_tokens: r.regime.shape.deviceTokens,
    l3: r.regime.shape.storage,
    prefill_tokens_per_s: r.regime.prefillTokensPerS,
    returning_prompt_tokens: r.regime.returningPromptTokens,
    tool_gap_over_prefill: r.regime.toolGapOverPrefill,
    tools_per_class: r.regime.toolsPerClass ?? TOOLS_PER_CLASS,
    planned_span_s: r.regime.plannedSpanS ?? +(plannedSpanMs(r.regime.sessions) / 1000).toFixed(1),
    ideal_recomputed: regimeFloor(r.configs),
    attainable_recomputed: r.attainable?.recomputed ?? null,
    gap_closed_attainable: r.attainable?.verdict.gap_closed ?? null,
    configs: r.configs,
    not_run: r.notRun,
    valid: v.valid,
    problems: v.problems,
    best_fair_peer: v.best_fair_peer,
    gap_closed: v.gap_closed,
    gap_closed_vs_best_fair: v.gap_closed_vs_best_fair,
    ttft_p90_ratio_vs_best_fair: v.ttft_p90_ratio_vs_best_fair,
    ttft_p90_ratio_vs_admission_only: v.ttft_p90_ratio_vs_admission_only,
    limits: limits(r.configs, pinBudgetBlocks(r.regime.shape)),
    ablation: ablationRows(r.configs),
    wall_s: r.wallS,
  };
}

async function main(): Promise<number> {
  const model = agentModel();
  const only = opt("configs", "");
  const all = configSpecs(WORKERS, ADMISSION_REQUESTS, true);
  const unknown = only ? only.split(",").filter((n) => !all.some((s) => s.name === n)) : [];
  if (unknown.length)
    throw new Error(
      `--configs: unknown configuration ${unknown.join(", ")} (${all.map((s) => s.name).join(", ")})`,
    );
  // --ablation: kvctl, each rule alone on program admission, and the base they are measured against (thunder).
  const ablation = argv.includes("--ablation");
  // --configs keeps its own order (with --lanes, the first N run first).
  const specs = only
    ? only.split(",").map((n) => all.find((s) => s.name === n) as ConfigSpec)
    : all.filter((s) =>
        ablation
          ? s.name === "kvctl" || s.name === "thunder" || s.role === "ablation"
          : s.role !== "ablation",
      );
  const names = opt("regimes", "saturated,gpu_shaped").split(",");
  for (const n of names)
    if (n !== "saturated" && n !== "gpu_shaped" && n !== "warm")
      throw new Error(`--regimes: unknown regime '${n}' (saturated, gpu_shaped, warm)`);
  const saturated = names.includes("saturated") ? saturatedRegime(model) : null;
  const gpuShaped = names.includes("gpu_shaped") ? await gpuShapedRegime(model, saturated) : null;
  const warm = names.includes("warm") ? warmRegime(model) : null;
  const results: RegimeResult[] = [];
  for (const regime of [saturated, gpuShaped])
    if (regime) results.push(await runRegime(regime, specs));
  // The warm scenario runs the gateway configurations that tell the rule's effect (a restart needs
  // the gateway's health checks to route around the worker): kvctl, kvctl_warm, cache_aware_adm.
  if (warm)
    results.push(
      await runRegime(warm, only ? specs : all.filter((s) => WARM_CONFIGS.includes(s.name))),
    );
  for (const r of results) printRegime(r);
  if (JSON_OUT)
    console.log(
      JSON.stringify({
        bench: "agent",
        runs: RUNS,
        admission_requests_per_worker: ADMISSION_REQUESTS,
        regimes: Object.fromEntries(results.map((r) => [r.regime.name, regimeJson(r)])),
      }),
    );
  const refused = results.filter((r) => !r.verdict.valid);
  for (const r of refused)
    log(`bench:agent: no verdict in ${r.regime.name}: ${r.verdict.problems.join("; ")}`);
  return refused.length ? 1 : 0;
}

try {
  process.exitCode = await main();
} finally {
  removeSharedTree();
}

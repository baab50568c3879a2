// Launchers for the demo and the end-to-end tests: a nats-server, a patched copy of the venv's
// SGLang (kvctl patch apply, in process), and the CPU worker HARNESS
// (`python -m kvctl_harness`, a test/demo stand-in for an SGLang server: see
// python/kvctl_harness/__init__.py), plus a client for its harness-only NATS channel
// (`kvctl-harness-{worker_id}`) and a recorder of its KV events.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { KvEventConsumer } from "../events/index.js";
import type { KvEvent, KvEventBatch } from "../events/index.js";
import { applySeries, probeSglang } from "../patch/index.js";
import { packageRoot, patchedTreeEnv, venvPython } from "../paths.js";
import { parseJson } from "../protocol/index.js";
import { freePort } from "../util/net.js";
import { waitExit } from "../util/process.js";

/** Creates the venv with python/setup_venv.sh when it is missing (says so on `log`). */
export function ensureVenv(log: (line: string) => void): void {
  if (existsSync(venvPython)) return;
  log(
    `kvctl: ${venvPython} is missing; running python/setup_venv.sh first (one time, a few minutes)`,
  );
  const r = spawnSync("bash", [join(packageRoot, "python", "setup_venv.sh")], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  if (r.status !== 0 || !existsSync(venvPython))
    throw new Error(`python/setup_venv.sh failed (exit ${r.status})`);
}

/** site-packages of the venv's sglang (find_spec does not import it). */
function sglangSitePackages(): string {
  const p = probeSglang(venvPython);
  if (p.sglangDir === null)
    throw new Error(
      `sglang is not installed in ${venvPython}: ${p.error ?? "find_spec('sglang') found none"}`,
    );
  return dirname(p.sglangDir);
}

export interface PatchedTree {
  dir: string;
  remove(): void;
}

/**
 * The venv's sglang copied with hard links into a temp dir (the patch kit replaces each file it
 * writes by temp file + rename, so the venv is never touched) and patched with kvctl's series;
 * the same recipe as python/tests/sglang_tree.py.
 */
export function buildPatchedTree(): PatchedTree {
  const site = sglangSitePackages();
  const dir = mkdtempSync(join(tmpdir(), "kvctl-sglang-"));
  const cp = spawnSync("cp", ["-al", join(site, "sglang"), join(dir, "sglang")]);
  if (cp.status !== 0) cpSync(join(site, "sglang"), join(dir, "sglang"), { recursive: true });
  for (const f of readdirSync(site))
    if (/^sglang-.*\.dist-info$/.test(f)) cpSync(join(site, f), join(dir, f), { recursive: true });
  const r = applySeries(dir);
  if (!r.ok) throw new Error(`kvctl patch apply failed: ${r.messages.join("; ")}`);
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface HarnessOptions {
  tree: string;
  natsUrl: string;
  workerId: string;
  pageSize?: number;
  deviceTokens?: number;
  hostRatio?: number;
  storageDir?: string;
  tickMs?: number;
  /** stderr lines of the harness (default: kept, shown on failure). */
  log?: (line: string) => void;
  readyTimeoutMs?: number;
}

export interface HarnessReady {
  worker_id: string;
  control_subject: string;
  harness_subject: string;
  events_endpoint: string;
  storage: boolean;
  page_size: number;
  device_tokens: number;
  host_tokens: number;
}

export interface HarnessProcess {
  ready: HarnessReady;
  child: ChildProcess;
  stderrTail(): string;
  stop(): Promise<void>;
}

export async function startHarness(o: HarnessOptions): Promise<HarnessProcess> {
  const args = harnessArgs(o, await freePort());
  // the harness lives in our package (python/kvctl_harness), never in the patched SGLang tree
  const env = patchedTreeEnv(o.tree, { KVCTL_WORKER_ID: o.workerId });
  const child = spawn(venvPython, args, { cwd: tmpdir(), env, stdio: ["ignore", "pipe", "pipe"] });
  let tail = "";
  child.stderr!.on("data", (d: Buffer) => {
    const s = d.toString();
    tail = (tail + s).slice(-8000);
    if (o.log) for (const line of s.split("\n")) if (line.trim()) o.log(line);
  });
  const ready = await readyLine(child, o.readyTimeoutMs ?? 240_000, () => tail);
  return {
    ready,
    child,
    stderrTail: () => tail,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await waitExit(child, 8000);
    },
  };
}

function harnessArgs(o: HarnessOptions, eventsPort: number): string[] {
  const args = [
    "-m",
    "kvctl_harness",
    "--kv-control-nats-url",
    o.natsUrl,
    "--kv-control-worker-id",
    o.workerId,
    "--events-port",
    String(eventsPort),
    "--page-size",
    String(o.pageSize ?? 4),
    "--device-tokens",
    String(o.deviceTokens ?? 256),
    "--host-ratio",
    String(o.hostRatio ?? 2),
    "--tick-ms",
    String(o.tickMs ?? 20),
    "--parent-pid",
    String(process.pid),
  ];
  if (o.storageDir) args.push("--storage-dir", o.storageDir);
  return args;
}

/** The harness's first stdout line, its ready message; rejects on a bad line, an exit or the timeout. */
function readyLine(
  child: ChildProcess,
  timeoutMs: number,
  tail: () => string,
): Promise<HarnessReady> {
  return new Promise<HarnessReady>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(
      () => reject(new Error(`harness not ready within ${timeoutMs} ms:\n${tail()}`)),
      timeoutMs,
    );
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf("\n");
      if (nl >= 0) {
        clearTimeout(timer);
        try {
          const msg = JSON.parse(out.slice(0, nl));
          if (msg.harness === "ready") resolve(msg as HarnessReady);
          else reject(new Error(`unexpected harness line: ${out.slice(0, nl)}`));
        } catch (e) {
          reject(new Error(`bad harness line ${out.slice(0, nl)}: ${e}`));
        }
      }
    });
    child.once(
      "exit",
      (code) => (
        clearTimeout(timer), reject(new Error(`harness exited ${code} before ready:\n${tail()}`))
      ),
    );
  });
}

/** Converts the JSON numbers of a harness reply's hash lists to bigint (exact either way). */
function big(v: unknown): bigint {
  return typeof v === "bigint" ? v : BigInt(v as number);
}

export interface ServeResult {
  tokens: number;
  cached_tokens: number;
  device_hit: number;
  host_hit: number;
  loaded_from_host: number;
  block_hashes: bigint[];
  storage_keys: string[];
}

export interface KvBlock {
  block_hash: bigint;
  tier: string;
  k: number[][];
  v: number[][];
}

/** Client of the harness-only channel `kvctl-harness-{worker_id}` (not a product API). */
export class HarnessClient {
  constructor(
    private readonly nc: NatsConnection,
    readonly workerId: string,
    private readonly timeoutMs = 120_000, // a deadline for a hang: the first serve warms torch up on a loaded machine
  ) {}

  async op(req: Record<string, unknown>): Promise<Record<string, unknown>> {
    const msg = await this.nc.request(`kvctl-harness-${this.workerId}`, JSON.stringify(req), {
      timeout: this.timeoutMs,
    });
    const res = parseJson(msg.data) as Record<string, unknown>;
    if (res.ok !== true)
      throw new Error(`harness op ${String(req.op)} failed: ${String(res.error)}`);
    return res;
  }

  async serve(tokenIds: number[], hold?: string): Promise<ServeResult> {
    const r = await this.op({ op: "serve", token_ids: tokenIds, ...(hold ? { hold } : {}) });
    return {
      ...(r as unknown as ServeResult),
      block_hashes: (r.block_hashes as unknown[]).map(big),
      storage_keys: (r.storage_keys as string[]) ?? [],
    };
  }

  async release(hold: string): Promise<boolean> {
    return (await this.op({ op: "release", hold })).released === true;
  }

  async flood(
    n: number,
    tokensPerRequest = 32,
    seed = 1,
  ): Promise<{ requests: number; tokens: number }> {
    return (await this.op({
      op: "flood",
      n,
      tokens_per_request: tokensPerRequest,
      seed,
    })) as unknown as { requests: number; tokens: number };
  }

  async cached(
    tokenIds: number[],
  ): Promise<{ device_hit: number; host_hit: number; cached_tokens: number }> {
    return (await this.op({ op: "cached", token_ids: tokenIds })) as unknown as {
      device_hit: number;
      host_hit: number;
      cached_tokens: number;
    };
  }

  async hashes(tokenIds: number[]): Promise<bigint[]> {
    return ((await this.op({ op: "hashes", token_ids: tokenIds })).block_hashes as unknown[]).map(
      big,
    );
  }

  async kv(hashes: bigint[]): Promise<{ blocks: KvBlock[]; missing: bigint[] }> {
    const r = await this.op({ op: "kv", block_hashes: hashes.map(String) });
    const blocks = (r.blocks as Record<string, unknown>[]).map((b) => ({
      ...(b as unknown as KvBlock),
      block_hash: big(b.block_hash),
    }));
    return { blocks, missing: (r.missing as unknown[]).map(big) };
  }

  async evict(tokens: number): Promise<void> {
    await this.op({ op: "evict", tokens });
  }

  async stats(): Promise<Record<string, unknown>> {
    return this.op({ op: "stats" });
  }

  async shutdown(): Promise<void> {
    await this.op({ op: "shutdown" }).catch(() => undefined);
  }
}

/** Records every KV event the harness publishes (src/events' ZMQ consumer). */
export class EventRecorder {
  readonly events: { seq: bigint; event: KvEvent }[] = [];
  readonly consumer: KvEventConsumer;

  constructor(endpoint: string, worker: string) {
    this.consumer = new KvEventConsumer({ endpoint, worker, log: () => undefined });
    this.consumer.on("batch", ({ seq, batch }: { seq: bigint; batch: KvEventBatch }) => {
      for (const event of batch.events) this.events.push({ seq, event });
    });
  }

  async start(): Promise<void> {
    await this.consumer.start();
  }

  async close(): Promise<void> {
    await this.consumer.close();
  }

  mark(): number {
    return this.events.length;
  }

  since(mark: number): KvEvent[] {
    return this.events.slice(mark).map((e) => e.event);
  }

  /** Waits until `pred` holds over the events since `mark` (or throws after timeoutMs). */
  async waitFor(
    mark: number,
    pred: (evs: KvEvent[]) => boolean,
    timeoutMs = 5000,
  ): Promise<KvEvent[]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const evs = this.since(mark);
      if (pred(evs)) return evs;
      if (Date.now() > deadline)
        throw new Error(
          `KV events: condition not met within ${timeoutMs} ms (${evs.length} events since mark: ${summarize(evs)})`,
        );
      await new Promise((r) => setTimeout(r, 20));
    }
  }
}

export function summarize(evs: KvEvent[]): string {
  const c: Record<string, number> = {};
  for (const e of evs) {
    const k = e.type === "AllBlocksCleared" ? e.type : `${e.type}:${e.tier}`;
    c[k] = (c[k] ?? 0) + (e.type === "AllBlocksCleared" ? 1 : e.blockHashes.length);
  }
  return (
    Object.entries(c)
      .map(([k, n]) => `${k}=${n}`)
      .join(" ") || "none"
  );
}

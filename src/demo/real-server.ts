// A real, patched SGLang 0.5.23 server on CPU for the demo, the benches and the tests: spawns
// `python -m kvctl_testbed serve` (python/kvctl_testbed/server.py, the one launch recipe) and
// waits for its JSON ready line. The patched tree is built here (kvctl patch apply, in process)
// unless one is given, and removed on stop.
import { type ChildProcess, spawn } from "node:child_process";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { packageRoot, venvPython } from "../paths.js";
import { waitExit } from "../util/process.js";
import { buildPatchedTree, type PatchedTree } from "./harness.js";

export interface RealServerOptions {
  /** kvctl control subscriber: NATS URL (off when unset) and this worker's id (default "w0"). */
  natsUrl?: string;
  workerId?: string;
  /**
   * The commands kvctl accepts (`--kv-control-config` `commands`): a list, or "rust" for those
   * SGLang's Rust tree core carries (python/kvctl_worker/cores.py; SGLang then keeps that core).
   * Unset: every command, and SGLang runs its Python tree core (Think needs it).
   */
  kvctlCommands?: "rust" | string[];
  /** Patched SGLang tree (the dir holding `sglang/`); built and removed by us when unset. */
  tree?: string;
  /** Model dir; the tiny local model (built once, cached under .cache/tiny-model) when unset. */
  model?: string;
  pageSize?: number;
  maxTotalTokens?: number;
  hostRatio?: number;
  /** HiCache host tier (default true; false = device pool only, no L3). */
  hicache?: boolean;
  /** `file` L3 storage dir; a temp dir (removed on stop) when unset; "" = no L3 backend. */
  storageDir?: string;
  /** ZMQ KV events on a loopback port (default true). */
  kvEvents?: boolean;
  /** Fixed HTTP and KV-event ports (a worker restarted where its router knows it); free ones when unset. */
  port?: number;
  eventsPort?: number;
  /** SGLang's warmup request (default true; its KV events go out before any subscriber). */
  warmup?: boolean;
  /** Extra `sglang.launch_server` flags and environment. */
  extraArgs?: string[];
  env?: Record<string, string>;
  /** Server stdout+stderr file (a temp file when unset). */
  logPath?: string;
  readyTimeoutS?: number;
  /** Run every server process under coverage.py with this rcfile. */
  coverageRcfile?: string;
}

/** What python/kvctl_testbed/server.py reports when the server is ready (ServerInfo). */
export interface RealServerInfo {
  base_url: string;
  port: number;
  pid: number;
  worker_id: string;
  nats_url: string | null;
  events_endpoint: string | null;
  model: string;
  tree: string;
  storage_dir: string | null;
  page_size: number;
  max_total_tokens: number;
  log_path: string;
  command: string[];
  start_s: number;
  server: string;
  model_note: string;
  /** The tree core kvctl said it runs on ("rust" | "python"); null with kvctl off. */
  tree_core: "rust" | "python" | null;
}

export interface RealServer {
  info: RealServerInfo;
  baseUrl: string;
  /** Stops the server's process group and removes what was made for it (tree, temp L3 dir). */
  stop(): Promise<void>;
  /** The launcher's stderr (the server's own log is info.log_path). */
  launcherStderr(): string;
}

function pyOptions(o: RealServerOptions, tree: string): Record<string, unknown> {
  const opt: Record<string, unknown> = { tree, worker_id: o.workerId ?? "w0" };
  if (o.natsUrl !== undefined) opt.nats_url = o.natsUrl;
  if (o.kvctlCommands !== undefined) opt.kvctl_commands = o.kvctlCommands;
  if (o.model !== undefined) opt.model = o.model;
  if (o.pageSize !== undefined) opt.page_size = o.pageSize;
  if (o.maxTotalTokens !== undefined) opt.max_total_tokens = o.maxTotalTokens;
  if (o.hostRatio !== undefined) opt.host_ratio = o.hostRatio;
  if (o.hicache !== undefined) opt.hicache = o.hicache;
  if (o.storageDir !== undefined) opt.storage_dir = o.storageDir;
  if (o.kvEvents !== undefined) opt.kv_events = o.kvEvents;
  if (o.port !== undefined) opt.port = o.port;
  if (o.eventsPort !== undefined) opt.events_port = o.eventsPort;
  if (o.warmup !== undefined) opt.warmup = o.warmup;
  if (o.extraArgs !== undefined) opt.extra_args = o.extraArgs;
  if (o.env !== undefined) opt.env = o.env;
  if (o.logPath !== undefined) opt.log_path = o.logPath;
  if (o.readyTimeoutS !== undefined) opt.ready_timeout_s = o.readyTimeoutS;
  if (o.coverageRcfile !== undefined) opt.coverage_rcfile = o.coverageRcfile;
  return opt;
}

/** Starts a real patched SGLang server; rejects with the command line and log tail if it cannot. */
export async function startRealServer(o: RealServerOptions = {}): Promise<RealServer> {
  let built: PatchedTree | undefined;
  const tree = o.tree ?? (built = buildPatchedTree()).dir;
  const env = {
    ...process.env,
    PYTHONPATH: [join(packageRoot, "python"), process.env.PYTHONPATH ?? ""]
      .filter(Boolean)
      .join(delimiter),
    PYTHONWARNINGS: "ignore",
  };
  const args = ["-m", "kvctl_testbed", "serve", "--options", JSON.stringify(pyOptions(o, tree))];
  const child: ChildProcess = spawn(venvPython, args, {
    cwd: tmpdir(),
    env,
    stdio: ["pipe", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-16_000);
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.stdin!.end();
    await waitExit(child, 60_000);
    built?.remove();
    built = undefined;
  };
  try {
    const info = await new Promise<RealServerInfo>((resolve, reject) => {
      let out = "";
      child.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        const nl = out.indexOf("\n");
        if (nl < 0) return;
        let msg: Record<string, unknown>;
        try {
          msg = JSON.parse(out.slice(0, nl)) as Record<string, unknown>;
        } catch {
          reject(
            new Error(`kvctl_testbed printed a non-JSON line: ${out.slice(0, nl)}\n${stderr}`),
          );
          return;
        }
        if (msg.sglang_server === "ready") resolve(msg as unknown as RealServerInfo);
        else reject(new Error(String(msg.error ?? out.slice(0, nl))));
      });
      child.once("exit", (code) =>
        reject(new Error(`kvctl_testbed exited ${code} before the server was ready:\n${stderr}`)),
      );
      child.once("error", reject);
    });
    return { info, baseUrl: info.base_url, stop, launcherStderr: () => stderr };
  } catch (e) {
    await stop();
    throw e;
  }
}

export interface GenerateResult {
  text: string;
  output_ids: number[];
  meta_info: {
    prompt_tokens: number;
    completion_tokens: number;
    cached_tokens: number;
    cached_tokens_details: { device: number; host: number; storage?: number } | null;
    [k: string]: unknown;
  };
}

/** POST /generate, greedy, with token ids or text. */
export async function generate(
  baseUrl: string,
  input: number[] | string,
  maxNewTokens = 4,
  extra: Record<string, unknown> = {},
): Promise<GenerateResult> {
  const body = {
    ...(typeof input === "string" ? { text: input } : { input_ids: input }),
    sampling_params: { max_new_tokens: maxNewTokens, temperature: 0, ignore_eos: true },
    ...extra,
  };
  const r = await fetch(`${baseUrl}/generate`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!r.ok) throw new Error(`/generate: HTTP ${r.status}: ${await r.text()}`);
  return (await r.json()) as GenerateResult;
}

/** Seeded token ids (xorshift32), distinct per seed: flood traffic that shares no prefix. */
export function randomTokens(seed: number, n: number): number[] {
  let x = (seed * 2654435761) >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out.push(8 + ((x >>> 0) % 1000));
  }
  return out;
}

/** `n` requests of `tokensEach` fresh tokens, `concurrency` at a time; returns the prompt tokens sent. */
export async function flood(
  baseUrl: string,
  n: number,
  tokensEach: number,
  seed: number,
  concurrency = 4,
): Promise<number> {
  let next = 0;
  let sent = 0;
  const worker = async () => {
    for (let i = next++; i < n; i = next++) {
      await generate(baseUrl, randomTokens(seed * 100_003 + i, tokensEach), 1);
      sent += tokensEach;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return sent;
}

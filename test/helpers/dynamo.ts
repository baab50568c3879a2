// Real NVIDIA Dynamo 1.6.1 processes on CPU for the Dynamo suite: `dynamo.sglang` workers (stock,
// or the patched tree under `python -m kvctl_worker.dynamo`) and `dynamo.frontend`, on Dynamo's
// file discovery backend, ZMQ event plane and TCP request plane (no etcd, no NATS for Dynamo
// itself). The recipe and its CPU fixes are shared/design/reference/dynamo-on-cpu.md: the CPU
// stand-ins (python/tests/stand_ins, with the Qwen video import shim), SGLANG_HOST_IP and
// DYN_TCP_RPC_HOST on loopback. Ready means the worker logged its model registration (and, with
// kvctl on, the subscriber's "listening" line), or the frontend lists the model.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";
import { dynamoSite, packageRoot, venvPython } from "../../src/paths.js";
import { freePort } from "../../src/util/net.js";
import { waitExit } from "../../src/util/process.js";

export const MODEL_NAME = "tiny";
const STAND_INS = join(packageRoot, "python", "tests", "stand_ins");
// biome-ignore lint/suspicious/noControlCharactersInRegex: Dynamo colours its log lines
const ANSI = /\x1b\[[0-9;]*m/g;

/** True when python/setup_venv.sh installed Dynamo (the suite needs it). */
/** The test bed's tiny local model (built once by kvctl_testbed, then cached). */
export function tinyModel(): string {
  const r = spawnSync(venvPython, ["-m", "kvctl_testbed", "model"], {
    encoding: "utf8",
    env: {
      ...process.env,
      PYTHONPATH: [join(packageRoot, "python"), process.env.PYTHONPATH]
        .filter(Boolean)
        .join(delimiter),
    },
  });
  if (r.status !== 0) throw new Error(`kvctl_testbed model failed: ${r.stderr}`);
  return (JSON.parse(r.stdout.trim().split("\n").pop()!) as { model: string }).model;
}

export function dynamoInstalled(): boolean {
  return existsSync(join(dynamoSite, "dynamo", "sglang", "main.py"));
}

export interface DynamoProcess {
  name: string;
  proc: ChildProcess;
  logPath: string;
  log(): string;
  stop(): Promise<void>;
}

export function env(discovery: string, home: string, tree: string | null): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PYTHONPATH: [STAND_INS, tree, dynamoSite, join(packageRoot, "python")]
      .filter(Boolean)
      .join(delimiter),
    KVCTL_CPU_STAND_INS: "server",
    KVCTL_DYNAMO_STAND_INS: "1",
    SGLANG_USE_CPU_ENGINE: "1",
    HF_HUB_OFFLINE: "1",
    OMP_NUM_THREADS: "1",
    PYTHONWARNINGS: "ignore",
    TOKENIZERS_PARALLELISM: "false",
    NO_COLOR: "1",
    DYN_DISCOVERY_BACKEND: "file",
    DYN_FILE_KV: discovery,
    DYN_EVENT_PLANE: "zmq",
    DYN_REQUEST_PLANE: "tcp",
    DYN_EVENT_PLANE_HOST: "127.0.0.1",
    DYN_TCP_RPC_HOST: "127.0.0.1",
    SGLANG_HOST_IP: "127.0.0.1",
    // the frontend caches model cards under $HOME/.cache/dynamo
    HOME: home,
  };
}

export function launch(
  name: string,
  args: string[],
  e: NodeJS.ProcessEnv,
  dir: string,
): DynamoProcess {
  mkdirSync(dir, { recursive: true });
  const logPath = join(dir, `${name}.log`);
  const fd = openSync(logPath, "a");
  const proc = spawn(venvPython, args, {
    cwd: dir,
    env: e,
    stdio: ["ignore", fd, fd],
    detached: true,
  });
  closeSync(fd);
  const log = () => (existsSync(logPath) ? readFileSync(logPath, "utf8").replace(ANSI, "") : "");
  const stop = async () => {
    if (proc.exitCode !== null || proc.signalCode !== null) return;
    try {
      process.kill(-proc.pid!, "SIGTERM");
    } catch {
      return;
    }
    const done = waitExit(proc);
    const t = setTimeout(() => {
      try {
        process.kill(-proc.pid!, "SIGKILL");
      } catch {}
    }, 30_000);
    await done;
    clearTimeout(t);
    try {
      process.kill(-proc.pid!, "SIGKILL"); // what SGLang's children left behind
    } catch {}
  };
  return { name, proc, logPath, log, stop };
}

export async function until(
  p: DynamoProcess,
  ready: () => Promise<boolean> | boolean,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (p.proc.exitCode !== null || p.proc.signalCode !== null) {
      throw new Error(
        `${p.name} exited (${p.proc.exitCode ?? p.proc.signalCode}) before ${what}; log tail:\n${p.log().split("\n").slice(-30).join("\n")}`,
      );
    }
    if (await ready()) return;
    if (Date.now() > deadline) {
      await p.stop();
      throw new Error(
        `${p.name}: no ${what} within ${timeoutMs / 1000} s; log tail:\n${p.log().split("\n").slice(-30).join("\n")}`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

export interface DynamoWorkerOptions {
  name: string;
  /** "kvctl": `python -m kvctl_worker.dynamo` on the patched tree; "stock": `python -m dynamo.sglang` on the venv's SGLang. */
  entry: "kvctl" | "stock";
  tree: string | null;
  model: string;
  discovery: string;
  dir: string;
  natsUrl?: string;
  workerId?: string;
  pageSize?: number;
  extraArgs?: string[];
  readyTimeoutMs?: number;
  /** Device KV pool (tokens) and HiCache host ratio; 2048 and 2 when unset. */
  maxTotalTokens?: number;
  hostRatio?: number;
  /** Set in this worker's environment only (its own L3 directory, say). */
  env?: Record<string, string>;
}

export interface DynamoWorker extends DynamoProcess {
  /** Dynamo's id of this worker (decimal): the worker_id of its KV events. */
  dynamoId: string;
  /** SGLang's own KV-event PUB endpoint (with token ids) in this worker. */
  sglangEvents: string;
}

export async function startDynamoWorker(o: DynamoWorkerOptions): Promise<DynamoWorker> {
  const eventsPort = await freePort();
  const sglangEvents = `tcp://127.0.0.1:${eventsPort}`;
  const args = [
    "-m",
    o.entry === "kvctl" ? "kvctl_worker.dynamo" : "dynamo.sglang",
    "--discovery-backend",
    "file",
    "--event-plane",
    "zmq",
    "--request-plane",
    "tcp",
    "--model-path",
    o.model,
    "--served-model-name",
    MODEL_NAME,
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--max-total-tokens",
    String(o.maxTotalTokens ?? 2048),
    "--mem-fraction-static",
    "0.3",
    "--page-size",
    String(o.pageSize ?? 16),
    "--sleep-on-idle",
    "--port",
    String(await freePort()),
    "--enable-hierarchical-cache",
    "--hicache-ratio",
    String(o.hostRatio ?? 2),
    "--hicache-io-backend",
    "direct",
    "--hicache-mem-layout",
    "layer_first",
    "--kv-events-config",
    JSON.stringify({ publisher: "zmq", endpoint: sglangEvents, bind: true }),
  ];
  if (o.natsUrl) args.push("--kv-control-nats-url", o.natsUrl);
  if (o.workerId) args.push("--kv-control-worker-id", o.workerId);
  args.push(...(o.extraArgs ?? []));
  const p = launch(
    o.name,
    args,
    { ...env(o.discovery, join(o.dir, "home"), o.entry === "kvctl" ? o.tree : null), ...o.env },
    o.dir,
  );
  await until(
    p,
    () => {
      const l = p.log();
      return (
        l.includes("Model registration succeeded") &&
        (!o.natsUrl || /kvctl subscriber: worker \S+ listening/.test(l))
      );
    },
    o.readyTimeoutMs ?? 400_000,
    "model registration",
  );
  const m = /Initializing KvEventPublisher for worker (\d+)/.exec(p.log());
  if (!m) throw new Error(`${o.name}: its log names no Dynamo worker id (KvEventPublisher line)`);
  return { ...p, dynamoId: m[1], sglangEvents };
}

export interface DynamoFrontend extends DynamoProcess {
  baseUrl: string;
}

export async function startDynamoFrontend(o: {
  name: string;
  discovery: string;
  dir: string;
  routerMode: string;
  extraArgs?: string[];
  env?: Record<string, string>;
}): Promise<DynamoFrontend> {
  const port = await freePort();
  const args = [
    "-m",
    "dynamo.frontend",
    "--discovery-backend",
    "file",
    "--event-plane",
    "zmq",
    "--request-plane",
    "tcp",
    "--http-host",
    "127.0.0.1",
    "--http-port",
    String(port),
    "--router-mode",
    o.routerMode,
    ...(o.extraArgs ?? []),
  ];
  const p = launch(
    o.name,
    args,
    { ...env(o.discovery, join(o.dir, "home"), null), ...o.env },
    o.dir,
  );
  const baseUrl = `http://127.0.0.1:${port}`;
  await until(
    p,
    async () => {
      try {
        const r = await fetch(`${baseUrl}/v1/models`);
        return (
          r.ok &&
          ((await r.json()) as { data?: { id: string }[] }).data?.some(
            (m) => m.id === MODEL_NAME,
          ) === true
        );
      } catch {
        return false;
      }
    },
    120_000,
    "model listed",
  );
  return { ...p, baseUrl };
}

export interface Completion {
  text: string;
  cachedTokens: number;
  promptTokens: number;
}

/** A greedy completion of token ids through the frontend. */
export async function complete(
  baseUrl: string,
  prompt: number[],
  maxTokens = 4,
): Promise<Completion> {
  const r = await fetch(`${baseUrl}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL_NAME, prompt, max_tokens: maxTokens, temperature: 0 }),
  });
  const body = (await r.json()) as {
    choices?: { text: string }[];
    usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number | null } };
  };
  if (!r.ok || !body.choices)
    throw new Error(`frontend answered ${r.status}: ${JSON.stringify(body).slice(0, 300)}`);
  return {
    text: body.choices[0].text,
    cachedTokens: body.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    promptTokens: body.usage?.prompt_tokens ?? 0,
  };
}

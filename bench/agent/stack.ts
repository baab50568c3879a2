// What one bench:agent configuration runs on: two real patched SGLang servers on CPU (the agent
// model: the tiny local model with a chat template that renders tools and tool calls), and in
// front of them the workers in turn, a kvctl gateway (with or without NATS and policies), or
// SGLang's own model gateway (smg) as a peer router.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import {
  appendFileSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildPatchedTree, type PatchedTree } from "../../src/demo/harness.js";
import { startRealServer, type RealServer } from "../../src/demo/real-server.js";
import { createGateway, type Gateway } from "../../src/app/gateway.js";
import { packageRoot, venvPython } from "../../src/paths.js";
import { type NatsServer, startNatsServer } from "../../src/testing/index.js";
import { waitExit } from "../../src/util/process.js";

const here = dirname(fileURLToPath(import.meta.url));

/** The tiny model with the agent chat template and a longer context, built once under .cache. */
export function agentModel(): string {
  const out = execFileSync(venvPython, ["-m", "kvctl_testbed.tiny_model"], {
    env: { ...process.env, PYTHONPATH: join(packageRoot, "python") },
    encoding: "utf8",
  });
  const base = JSON.parse(out.trim().split("\n").pop() as string).model as string;
  const template = readFileSync(join(here, "chat_template.jinja"), "utf8");
  const dir = join(
    packageRoot,
    ".cache",
    "agent-model",
    `${base.split("/").pop()}-${Buffer.from(template).toString("base64url").length}`,
  );
  if (existsSync(join(dir, "config.json"))) return dir;
  const tmp = `${dir}.tmp-${process.pid}`;
  mkdirSync(tmp, { recursive: true });
  for (const f of readdirSync(base)) copyFileSync(join(base, f), join(tmp, f));
  writeFileSync(join(tmp, "chat_template.jinja"), template);
  const cfg = JSON.parse(readFileSync(join(tmp, "config.json"), "utf8"));
  cfg.max_position_embeddings = 32768;
  writeFileSync(join(tmp, "config.json"), JSON.stringify(cfg, null, 2));
  renameSync(tmp, dir);
  return dir;
}

export interface ServerShape {
  model: string;
  pageSize: number;
  deviceTokens: number;
  hostRatio: number;
  /** HiCache's `file` L3 (false: device + host only, what is dropped is lost). */
  storage: boolean;
  /** One `file` L3 directory for every worker (unset: each worker its own temp dir). */
  sharedStorageDir?: string;
}

/** Where a worker listens, so a restart comes back where the gateway and its subscriber know it. */
export interface WorkerPlace {
  port: number;
  eventsPort: number;
}

export async function startWorkers(
  shape: ServerShape,
  extraArgs: string[],
  natsUrl: string | undefined,
): Promise<RealServer[]> {
  const settled = await Promise.allSettled([
    startWorker(shape, extraArgs, natsUrl, "w0"),
    startWorker(shape, extraArgs, natsUrl, "w1"),
  ]);
  const ok = settled.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
  const failed = settled.find((s) => s.status === "rejected") as PromiseRejectedResult | undefined;
  if (failed) {
    await Promise.all(ok.map((s) => s.stop()));
    throw failed.reason;
  }
  return ok;
}

/**
 * One patched SGLang tree and one torch extensions directory for every worker this bench process
 * starts. SGLang's page-hash extension is JIT-built by torch; its build command names the source's
 * path, so workers on trees of their own rebuild it one after another (and under the lock every
 * SGLang process on the machine shares, which other builds hold for minutes on a busy machine). On
 * one tree and a directory of the bench's own it is built once per bench run.
 */
let shared: { tree: PatchedTree; extensions: string } | null = null;

function sharedTree(): { tree: PatchedTree; extensions: string } {
  shared ??= {
    tree: buildPatchedTree(),
    extensions: mkdtempSync(join(tmpdir(), "kvctl-bench-torch-ext-")),
  };
  return shared;
}

/** Removes the shared tree and extensions directory (once no worker runs on them). */
export function removeSharedTree(): void {
  if (!shared) return;
  shared.tree.remove();
  rmSync(shared.extensions, { recursive: true, force: true });
  shared = null;
}

/** SGLang flags of every row's workers, whatever parses their tool calls and reasoning (the Dynamo rows: Dynamo's own parsers). */
export const SGLANG_ARGS = [
  "--enable-cache-report",
  "--enable-metrics",
  "--context-length",
  "32768",
];

/** One worker of the bench; `place` starts it where an earlier one of the same id listened. */
export function startWorker(
  shape: ServerShape,
  extraArgs: string[],
  natsUrl: string | undefined,
  id: string,
  place?: WorkerPlace,
): Promise<RealServer> {
  // --enable-metrics: the bench reads HiCache's L3 counters (backups, prefetch hits and why found
  // tokens were not used) from each worker's /metrics.
  // --reasoning-parser: the worker separates the answer's <think> span (reasoning_content), so the
  // gateway sees the reasoning of each turn (the think rule's input).
  const args = [
    ...SGLANG_ARGS,
    "--tool-call-parser",
    "hermes",
    "--reasoning-parser",
    "qwen3",
    ...extraArgs,
  ];
  const storage = shape.storage
    ? shape.sharedStorageDir
      ? { storageDir: shape.sharedStorageDir }
      : {}
    : { storageDir: "" };
  const { tree, extensions } = sharedTree();
  return startRealServer({
    tree: tree.dir,
    env: { TORCH_EXTENSIONS_DIR: extensions },
    model: shape.model,
    workerId: id,
    natsUrl,
    pageSize: shape.pageSize,
    maxTotalTokens: shape.deviceTokens,
    hostRatio: shape.hostRatio,
    warmup: false,
    extraArgs: args,
    readyTimeoutS: 600,
    ...storage,
    ...(place ?? {}),
  });
}

/** Where a running worker listens (its HTTP and KV-event ports). */
export function placeOf(w: RealServer): WorkerPlace {
  const m = /:(\d+)$/.exec(w.info.events_endpoint ?? "");
  if (!m)
    throw new Error(
      `worker ${w.info.worker_id} publishes no KV events: it cannot be restarted in place`,
    );
  return { port: w.info.port, eventsPort: Number(m[1]) };
}

export async function startNats(dir: string): Promise<NatsServer> {
  mkdirSync(dir, { recursive: true });
  return startNatsServer(["-js", "-sd", dir]);
}

export async function startKvctlGateway(
  workers: RealServer[],
  nats: NatsServer | null,
  policy: "noop" | "agent",
  policies: Record<string, unknown> | undefined,
  admission: Record<string, unknown> | undefined,
  idleAfterSeconds: number,
  decisionLogPath?: string,
): Promise<Gateway> {
  return createGateway({
    config: {
      listen: { host: "127.0.0.1", port: 0 },
      workers: workers.map((w) => ({ id: w.info.worker_id, url: w.baseUrl })),
      // CPU workers run prefill turns of seconds: commands get that long to be acked.
      ...(nats ? { nats: { url: nats.url, opTimeoutMs: 5000, commandTimeoutMs: 15_000 } } : {}),
      sessions: { bucket: `bench_agent_${process.pid}_${Date.now()}`, idleAfterSeconds },
      health: { intervalMs: 5000, timeoutMs: 30_000, failures: 5 },
      policy,
      ...(policies ? { policies } : {}),
      ...(admission ? { admission } : {}),
      jsonLog: decisionLogPath !== undefined,
    },
    log: () => undefined,
    ...(decisionLogPath
      ? { decisionLog: (l: string) => appendFileSync(decisionLogPath, `${l}\n`) }
      : {}),
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
}

export interface PeerRouter {
  url: string;
  stop(): Promise<void>;
}

/** SGLang's model gateway (PyPI `smg`) with its cache-aware policy; throws when it cannot run here. */
export async function startSmg(
  workers: RealServer[],
  logPath: string,
  extraArgs: string[] = [],
): Promise<PeerRouter> {
  try {
    execFileSync(venvPython, ["-c", "import smg"], { stdio: "ignore" });
  } catch {
    execFileSync(venvPython, ["-m", "pip", "install", "-q", "smg==1.13.0"], { stdio: "inherit" });
  }
  const port = await freePort();
  const child: ChildProcess = spawn(
    venvPython,
    [
      "-m",
      "smg.launch_router",
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--policy",
      "cache_aware",
      "--worker-urls",
      ...workers.map((w) => w.baseUrl),
      "--log-dir",
      dirname(logPath),
      ...extraArgs,
    ],
    { stdio: ["ignore", "ignore", "pipe"], detached: true },
  );
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`smg exited ${child.exitCode}: ${stderr}`);
    try {
      const r = await fetch(`${url}/v1/models`);
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`smg did not answer /v1/models within 120 s: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  return {
    url,
    async stop() {
      if (child.exitCode === null && child.pid) process.kill(-child.pid, "SIGTERM");
      await waitExit(child, 30_000);
    },
  };
}

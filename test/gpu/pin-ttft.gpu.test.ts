// Pin under flood (`npm run test:gpu`): a real `sglang.launch_server` with HiCache, kvctl's control
// subscriber (from the patch series applied to the installed SGLang) and nats-server. A session
// prefix is cached, then a flood of unrelated prompts pushes the KV cache `depth` times its GPU
// capacity; we measure the prefix's time to first token with and without a `Cache pin` on its
// blocks. Pinned, the prefix stays in the host tier and comes back by a host->device load;
// unpinned, deep floods evict it from the host too and it is recomputed.
//
// Needs a CUDA host with the user's own SGLang (0.5.23, CUDA build of torch) in a Python given as
// KVCTL_PIN_PYTHON, the kvctl patch series applied to that SGLang (`kvctl patch apply <its
// site-packages>`), and SGLANG_MODEL (a local model path); README.md "GPU tests" has the command.
// The project venv cannot serve: its torch is CPU-only, and the test refuses to start from a
// CPU-only torch (a failure naming the interpreter, not a skip). Without a GPU or SGLANG_MODEL it
// skips with one line saying why.
// The effect asserted: at every flood depth >= 8 GPU KV capacities, the pinned prefix's median
// TTFT over >= 5 samples is at most half the unpinned median (a real effect: pinned comes back
// from the host tier, unpinned is recomputed).
// Knobs (env): KVCTL_PIN_DEPTHS (default "0,2,8": flood size in GPU KV capacities; one >= 8 is
// required), KVCTL_PIN_SAMPLES (5, at least 5), KVCTL_PIN_PREFIX_TOKENS (8192),
// KVCTL_PIN_PAGE_SIZE (64), KVCTL_PIN_MEM_FRACTION (0.5), KVCTL_PIN_HICACHE_RATIO (2),
// KVCTL_PIN_SERVER_ARGS (extra launch_server args, space-separated), KVCTL_PIN_TIMEOUT_S (server
// start, 900). The subscriber is switched on by the series' own server flags
// (--kv-control-nats-url, --kv-control-worker-id). Prints a table and one JSON line `{"pinTtft": ...}`.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageRoot } from "../../src/addon.js";
import { venvPython } from "../../src/paths.js";
import { freePort } from "../../src/util/net.js";

const cudaBuild = join(packageRoot, "build-cuda", "Release", "kvctl.node");
if (!process.env.KVCTL_ADDON && existsSync(cudaBuild)) process.env.KVCTL_ADDON = cudaBuild;

const python = process.env.KVCTL_PIN_PYTHON ?? venvPython;
const WORKER_ID = "pin-ttft-0";

function hasCuda(): string {
  const smi = spawnSync("nvidia-smi", ["-L"], { encoding: "utf8" });
  if (smi.status !== 0 || !/GPU \d+:/.test(smi.stdout ?? ""))
    return "no CUDA device (nvidia-smi -L found no GPU)";
  return "";
}

function sitePackages(): string | null {
  const r = spawnSync(
    python,
    ["-c", "import sglang, os; print(os.path.dirname(os.path.dirname(sglang.__file__)))"],
    { encoding: "utf8" },
  );
  return r.status === 0 ? r.stdout.trim() : null;
}

// The control subscriber is in the series when a patch of the series for this SGLang version
// hooks it in; it is usable when that series is applied cleanly to the interpreter's SGLang.
async function subscriberReady(): Promise<string> {
  const site = sitePackages();
  if (!site) return `SGLang does not import with ${python}`;
  let status;
  try {
    const patch = await import("../../src/patch/index.js");
    status = patch.seriesStatus(site, { python });
  } catch (err) {
    return `patch status unavailable: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}`;
  }
  const version = status.tree.version ?? "?";
  const dir = join(packageRoot, "patches", `sglang-${version}`);
  const patches = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".patch")) : [];
  const hooks = patches.filter(
    (f) =>
      /control|subscriber/i.test(f) ||
      /control[_-]?subscriber|kv-control/i.test(readFileSync(join(dir, f), "utf8")),
  );
  if (hooks.length === 0)
    return `control subscriber not yet in the patch series (patches/sglang-${version}/ has no control subscriber patch)`;
  if (!status.clean)
    return `the patch series is not cleanly applied to ${site} (run kvctl patch apply ${site})`;
  return "";
}

// The interpreter's torch must be a CUDA build that sees a device: a CPU-only torch (the project
// venv's) would start SGLang on CPU and time something else entirely.
function cudaTorch(): string {
  const r = spawnSync(
    python,
    [
      "-c",
      "import json, torch; print(json.dumps({'v': torch.__version__, 'cuda': torch.version.cuda, 'ok': torch.cuda.is_available()}))",
    ],
    { encoding: "utf8" },
  );
  if (r.status !== 0)
    return `${python} cannot import torch: ${(r.stderr || r.stdout).trim().split("\n").at(-1)}`;
  const t = JSON.parse(r.stdout.trim().split("\n").at(-1) ?? "{}") as {
    v: string;
    cuda: string | null;
    ok: boolean;
  };
  if (!t.cuda)
    return `${python} has a CPU-only torch (${t.v}); set KVCTL_PIN_PYTHON to a Python with SGLang and a CUDA torch`;
  if (!t.ok) return `${python}'s torch ${t.v} (CUDA ${t.cuda}) sees no usable device`;
  return "";
}

const why =
  hasCuda() || (!process.env.SGLANG_MODEL ? "SGLANG_MODEL unset (a local model path)" : "");
if (why) console.log(`pin-under-flood TTFT test skipped: ${why}`);
const refusal = why ? "" : cudaTorch() || (await subscriberReady());

const env = (k: string, d: string) => process.env[k] ?? d;
const DEPTHS = env("KVCTL_PIN_DEPTHS", "0,2,8").split(",").map(Number);
const SAMPLES = Number(env("KVCTL_PIN_SAMPLES", "5"));
const DEEP = 8; // depths from here on must show the effect
const PREFIX_TOKENS = Number(env("KVCTL_PIN_PREFIX_TOKENS", "8192"));
const PAGE = Number(env("KVCTL_PIN_PAGE_SIZE", "64"));
const FLOOD_PROMPT = 4096;

function ids(n: number, seed: number): number[] {
  let x = seed >>> 0 || 1;
  const out = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = 1000 + ((x >>> 0) % 29000);
  }
  return out;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

describe.skipIf(Boolean(why))(
  `pin under flood: TTFT with and without pin${why ? ` (skipped: ${why})` : ""}`,
  () => {
    let server: ChildProcess | null = null;
    let base = "";
    let log = "";
    let nats: { url: string; stop(): Promise<void> } | null = null;
    let nc: { close(): Promise<void> } | null = null;
    let publisher: import("../../src/control/index.js").ControlPublisher;

    beforeAll(async () => {
      if (refusal) throw new Error(`pin-under-flood TTFT test refuses to start: ${refusal}`);
      if (!(SAMPLES >= 5))
        throw new Error(
          `KVCTL_PIN_SAMPLES must be >= 5 (medians of at least 5 samples), got ${SAMPLES}`,
        );
      if (!DEPTHS.some((d) => d >= DEEP))
        throw new Error(
          `KVCTL_PIN_DEPTHS must include a depth >= ${DEEP} (got ${DEPTHS.join(",")})`,
        );
      const { startNatsServer } = await import("../helpers/nats-server.js");
      nats = await startNatsServer();
      const control = await import("../../src/control/index.js");
      const conn = await control.connectControlPlane({ servers: nats.url, name: "pin-ttft" });
      nc = conn as unknown as { close(): Promise<void> };
      publisher = new control.ControlPublisher(conn as never, { timeoutMs: 10_000 });
      const port = await freePort();
      base = `http://127.0.0.1:${port}`;
      const args = [
        "-m",
        "sglang.launch_server",
        "--model-path",
        process.env.SGLANG_MODEL!,
        "--host",
        "127.0.0.1",
        "--port",
        String(port),
        "--page-size",
        String(PAGE),
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        env("KVCTL_PIN_HICACHE_RATIO", "2"),
        "--mem-fraction-static",
        env("KVCTL_PIN_MEM_FRACTION", "0.5"),
        "--kv-control-nats-url",
        nats.url,
        "--kv-control-worker-id",
        WORKER_ID,
        ...(process.env.KVCTL_PIN_SERVER_ARGS
          ? process.env.KVCTL_PIN_SERVER_ARGS.split(/\s+/).filter(Boolean)
          : []),
      ];
      server = spawn(python, args, {
        env: process.env,
        stdio: ["ignore", "pipe", "pipe"],
      });
      const keep = (d: Buffer) => {
        log = (log + d.toString()).slice(-20_000);
      };
      server.stdout?.on("data", keep);
      server.stderr?.on("data", keep);
      const deadline = Date.now() + Number(env("KVCTL_PIN_TIMEOUT_S", "900")) * 1000;
      for (;;) {
        if (server.exitCode !== null)
          throw new Error(`launch_server exited ${server.exitCode}:\n${log}`);
        if (Date.now() > deadline) throw new Error(`launch_server not healthy in time:\n${log}`);
        try {
          const r = await fetch(`${base}/health_generate`);
          if (r.ok) break;
        } catch {
          /* not up yet */
        }
        // /health_generate answering 200 is the readiness signal; the pause only spaces the polls
        // (each one runs a generation on a server that is still loading).
        await new Promise((r) => setTimeout(r, 2000));
      }
    }, 1_000_000);

    afterAll(async () => {
      if (server && server.exitCode === null) {
        server.kill("SIGTERM");
        const t = setTimeout(() => server?.kill("SIGKILL"), 15_000);
        await new Promise((r) => server?.once("exit", r));
        clearTimeout(t);
      }
      await nc?.close();
      await nats?.stop();
    }, 60_000);

    async function generate(inputIds: number[]): Promise<number> {
      const t0 = performance.now();
      const r = await fetch(`${base}/generate`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          input_ids: inputIds,
          sampling_params: { max_new_tokens: 1, temperature: 0 },
          stream: true,
        }),
      });
      if (!r.ok || !r.body) throw new Error(`/generate ${r.status}: ${await r.text()}`);
      const reader = r.body.getReader();
      let ttft = -1;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (ttft < 0 && value && Buffer.from(value).toString().includes("data:"))
          ttft = performance.now() - t0;
      }
      return ttft < 0 ? performance.now() - t0 : ttft;
    }

    async function flood(tokens: number, seed: number): Promise<void> {
      const n = Math.ceil(tokens / FLOOD_PROMPT);
      let next = 0;
      const worker = async () => {
        while (next < n) {
          const i = next++;
          await generate(ids(FLOOD_PROMPT, seed * 100_003 + i));
        }
      };
      await Promise.all([worker(), worker(), worker(), worker()]);
    }

    it(`sweeps flood depth; from depth ${DEEP} the pinned median TTFT is at most half the unpinned`, async () => {
      const info = (await (await fetch(`${base}/get_server_info`)).json()) as Record<
        string,
        unknown
      >;
      const gpuTokens = Number(
        info.max_total_num_tokens ??
          (info as { internal_states?: { max_total_num_tokens?: number }[] }).internal_states?.[0]
            ?.max_total_num_tokens ??
          process.env.KVCTL_PIN_GPU_TOKENS ??
          0,
      );
      expect(
        gpuTokens,
        "GPU KV capacity (max_total_num_tokens) from /get_server_info or KVCTL_PIN_GPU_TOKENS",
      ).toBeGreaterThan(0);
      const { blockHashes } = await import("../../src/hash/index.js");
      const rows: {
        depth: number;
        pinned: boolean;
        sample: number;
        ttftMs: number;
        ack?: string;
      }[] = [];
      let seed = 1;
      // Samples alternate unpinned and pinned, so drift on the host lands on both alike.
      for (const depth of DEPTHS)
        for (let sample = 0; sample < SAMPLES; sample++) {
          for (const pinned of [false, true]) {
            await fetch(`${base}/flush_cache`, { method: "POST" });
            const prefix = ids(PREFIX_TOKENS, 7 + seed);
            const question = [...prefix, ...ids(32, 99 + seed)];
            await generate(prefix); // cache the session prefix
            const hashes = Array.from(blockHashes(prefix, { pageSize: PAGE }));
            let ack: string | undefined;
            if (pinned) {
              const a = await publisher.send(WORKER_ID, {
                type: "Cache",
                block_hashes: hashes,
                pin: true,
              } as never);
              ack = (a as { status: string }).status;
              expect(["applied", "partial"]).toContain(ack);
            }
            await flood(depth * gpuTokens, seed++);
            const ttftMs = await generate(question);
            rows.push({ depth, pinned, sample, ttftMs, ack });
            if (pinned)
              await publisher.send(WORKER_ID, {
                type: "Cache",
                block_hashes: hashes,
                pin: false,
              } as never);
          }
        }
      const med = (depth: number, pinned: boolean) =>
        median(rows.filter((r) => r.depth === depth && r.pinned === pinned).map((r) => r.ttftMs));
      console.log(
        `pin under flood: prefix ${PREFIX_TOKENS} tokens, GPU KV ${gpuTokens} tokens, page ${PAGE}, median of ${SAMPLES} samples`,
      );
      console.log("depth  unpinned ms  pinned ms  unpinned/pinned");
      for (const d of DEPTHS) {
        const u = med(d, false),
          p = med(d, true);
        console.log(
          `${String(d).padStart(5)}  ${u.toFixed(1).padStart(11)}  ${p.toFixed(1).padStart(9)}  ${(u / p).toFixed(2).padStart(15)}`,
        );
      }
      console.log(
        JSON.stringify({
          pinTtft: {
            prefixTokens: PREFIX_TOKENS,
            gpuTokens,
            pageSize: PAGE,
            samples: SAMPLES,
            rows,
          },
        }),
      );
      // Past the host tier's reach of an unpinned prefix, pinning must at least halve the TTFT.
      for (const d of DEPTHS.filter((x) => x >= DEEP)) {
        expect(
          rows
            .filter((r) => r.depth === d && r.pinned)
            .every((r) => r.ack === "applied" || r.ack === "partial"),
        ).toBe(true);
        expect(
          med(d, true) * 2,
          `depth ${d}: pinned median ${med(d, true).toFixed(1)} ms vs unpinned ${med(d, false).toFixed(1)} ms`,
        ).toBeLessThanOrEqual(med(d, false));
      }
    }, 3_600_000);
  },
);

// `kvctl doctor`: what this host has for kvctl — the native addon (CPU/CUDA build, SHA-NI), the
// CUDA runtime/driver and devices, nats-server, the Python venv and its SGLang, and (with
// --sglang <path>) the patch status of an SGLang tree. Each check is ok / warn / fail / unavailable.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { findNatsServer } from "../../testing/nats-server.js";
import { seriesStatus } from "../../patch/index.js";
import { venvPython } from "../../paths.js";
import { commandArgs } from "../args.js";
import type { Command } from "../command.js";

export type CheckState = "ok" | "warn" | "fail" | "unavailable";

export interface Check {
  name: string;
  state: CheckState;
  summary: string;
  details?: Record<string, unknown>;
}

export interface DoctorReport {
  ok: boolean;
  checks: Check[];
}

const OPTIONS = {
  sglang: { type: "string" },
  python: { type: "string" },
  json: { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const;

const HELP = `usage: kvctl doctor [--sglang <path>] [--python <interp>] [--json]

Checks this host for kvctl:
  addon      the native addon loads; CPU/CUDA build, SHA-256 backend (SHA-NI)
  cuda       CUDA runtime (static, in the addon) and driver versions; devices with memory
  nats       nats-server ($KVCTL_NATS_SERVER, <repo>/.venv/bin/nats-server, PATH) and its version
  python     the project venv (<repo>/.venv, or --python / $KVCTL_PYTHON) and its SGLang version
  patches    with --sglang <path>: the kvctl patch series status of that SGLang tree

options:
  --sglang <path>     an SGLang tree (git checkout, site-packages or the sglang/ dir) to check
  --python <interp>   the Python interpreter to ask (default: $KVCTL_PYTHON, then <repo>/.venv/bin/python)
  --json              one JSON object on stdout
  -h, --help          this text

exit status: 0 when nothing failed (warnings allowed: no GPU is a warning); 1 when a check failed.`;

function gib(n: number): string {
  return `${(n / 2 ** 30).toFixed(1)} GiB`;
}

function cudaVersion(v: number): string {
  return v ? `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}` : "none";
}

function run(cmd: string, args: string[], timeoutMs = 20_000): { ok: boolean; out: string } {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: timeoutMs });
  if (r.error) return { ok: false, out: r.error.message };
  return { ok: r.status === 0, out: `${r.stdout ?? ""}${r.stderr ?? ""}`.trim() };
}

async function checkAddon(): Promise<Check[]> {
  let copy: typeof import("../../copy/index.js");
  try {
    copy = await import("../../copy/index.js");
    const b = copy.buildInfo();
    const c = b.cuda;
    const addon: Check = {
      name: "addon",
      state: "ok",
      summary: `loaded; ${c.built ? "CUDA build" : "CPU-only build"}; SHA-256 ${b.sha256.backend}${b.sha256.shaNi ? " (SHA-NI)" : " (no SHA-NI on this CPU)"}`,
      details: {
        path: process.env.KVCTL_ADDON ?? null,
        cudaBuilt: c.built,
        shaNi: b.sha256.shaNi,
        sha256Backend: b.sha256.backend,
        compiler: b.compiler ?? null,
        napiVersion: b.napiVersion,
        layouts: b.layouts,
      },
    };
    let cuda: Check;
    if (!c.built) {
      cuda = {
        name: "cuda",
        state: "warn",
        summary:
          "not built into the addon (npm run build:cuda on a host with nvcc); GPU paths unavailable, the CPU twin works",
        details: { built: false },
      };
    } else {
      const devs = c.devices.map(
        (d) =>
          `#${d.index} ${d.name} (sm ${d.computeCapability}, ${gib(d.totalBytes)}, ${gib(d.freeBytes)} free)`,
      );
      const head = `runtime ${cudaVersion(c.runtimeVersion)} (static), driver ${cudaVersion(c.driverVersion)}`;
      cuda = c.available
        ? {
            name: "cuda",
            state: "ok",
            summary: `${head}; ${c.deviceCount} device(s): ${devs.join("; ")}`,
            details: { ...c },
          }
        : {
            name: "cuda",
            state: "warn",
            summary: `${head}; no usable device${c.error ? `: ${c.error.name} (${c.error.code})` : ""}`,
            details: { ...c },
          };
    }
    return [addon, cuda];
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    return [
      { name: "addon", state: "fail", summary: msg },
      { name: "cuda", state: "unavailable", summary: "unknown: the addon did not load" },
    ];
  }
}

function checkNats(): Check {
  const f = findNatsServer();
  if (!f.path) {
    const why =
      f.source === "KVCTL_NATS_SERVER"
        ? `KVCTL_NATS_SERVER=${f.tried[0]} does not exist`
        : "not found";
    return {
      name: "nats",
      state: "warn",
      summary: `nats-server ${why} (run python/setup_venv.sh, or set KVCTL_NATS_SERVER)`,
      details: { tried: f.tried },
    };
  }
  const v = run(f.path, ["--version"]);
  const version = /v?(\d+\.\d+\.\d+\S*)/.exec(v.out)?.[1] ?? null;
  if (!v.ok || !version)
    return {
      name: "nats",
      state: "warn",
      summary: `${f.path} (from ${f.source}) does not run: ${v.out.split("\n")[0]}`,
      details: { path: f.path, source: f.source },
    };
  return {
    name: "nats",
    state: "ok",
    summary: `nats-server ${version} at ${f.path} (from ${f.source})`,
    details: { path: f.path, source: f.source, version },
  };
}

function checkPython(python: string | undefined): Check {
  const interp = python ?? venvPython;
  if (!existsSync(interp) && interp.includes("/")) {
    return {
      name: "python",
      state: "warn",
      summary: `no Python venv at ${interp} (run python/setup_venv.sh)`,
      details: { python: interp },
    };
  }
  const code = [
    "import sys, json, importlib.metadata as m, importlib.util as u",
    "v = None",
    "try: v = m.version('sglang')",
    "except Exception: pass",
    "s = u.find_spec('sglang')",
    "print(json.dumps({'python': sys.version.split()[0], 'prefix': sys.prefix, 'sglang': v, 'sglangPath': (list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else None)}))",
  ].join("\n");
  const r = run(interp, ["-c", code]);
  if (!r.ok)
    return {
      name: "python",
      state: "warn",
      summary: `${interp} does not run: ${r.out.split("\n").pop()}`,
      details: { python: interp },
    };
  let info: { python: string; prefix: string; sglang: string | null; sglangPath: string | null };
  try {
    info = JSON.parse(r.out.split("\n").pop() ?? "");
  } catch {
    return {
      name: "python",
      state: "warn",
      summary: `${interp}: unexpected output`,
      details: { python: interp, output: r.out },
    };
  }
  const details = { interpreter: interp, ...info };
  if (!info.sglang)
    return {
      name: "python",
      state: "warn",
      summary: `Python ${info.python} at ${info.prefix}; SGLang not installed`,
      details,
    };
  return {
    name: "python",
    state: "ok",
    summary: `Python ${info.python} at ${info.prefix}; SGLang ${info.sglang} at ${info.sglangPath}`,
    details,
  };
}

function checkPatches(path: string | undefined, python: string | undefined): Check | null {
  if (path === undefined) return null;
  try {
    const st = seriesStatus(path, python ? { python } : {});
    const applied = st.patches.filter((p) => p.state === "applied").length;
    const summary = st.seriesError
      ? `SGLang ${st.tree.version ?? "?"} at ${st.tree.pkg}: ${st.seriesError}`
      : `SGLang ${st.tree.version ?? "?"} at ${st.tree.pkg}: series ${st.series?.name ?? "?"} ${applied}/${st.patches.length} applied${st.clean ? ", clean" : ", not clean"}`;
    return {
      name: "patches",
      state: st.clean ? "ok" : "warn",
      summary,
      details: {
        clean: st.clean,
        series: st.series?.name ?? null,
        seriesError: st.seriesError,
        patches: st.patches,
        messages: st.messages,
      },
    };
  } catch (err) {
    return {
      name: "patches",
      state: "fail",
      summary: err instanceof Error ? err.message : String(err),
    };
  }
}

export async function doctor(
  opts: { sglang?: string; python?: string } = {},
): Promise<DoctorReport> {
  const checks: Check[] = [...(await checkAddon()), checkNats(), checkPython(opts.python)];
  const p = checkPatches(opts.sglang, opts.python);
  if (p) checks.push(p);
  return { ok: !checks.some((c) => c.state === "fail"), checks };
}

const MARK: Record<CheckState, string> = {
  ok: "ok  ",
  warn: "warn",
  fail: "FAIL",
  unavailable: "n/a ",
};

async function main(argv: string[]): Promise<number> {
  const parsed = commandArgs(argv, {
    name: "kvctl doctor",
    options: OPTIONS,
    help: HELP,
    helpOnError: "blank",
  });
  if (typeof parsed === "number") return parsed;
  const { values } = parsed;
  const report = await doctor({ sglang: values.sglang, python: values.python });
  if (values.json) process.stdout.write(`${JSON.stringify(report)}\n`);
  else {
    for (const c of report.checks)
      console.log(`${MARK[c.state]}  ${c.name.padEnd(8)} ${c.summary}`);
  }
  return report.ok ? 0 : 1;
}

export const command: Command = {
  summary:
    "check this host: addon (CUDA, SHA-NI), CUDA driver/devices, nats-server, venv + SGLang, patch status",
  run: main,
};

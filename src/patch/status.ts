// `kvctl patch status`: what is applied, what drifted (hand edits in the tree, placed files out of
// date with python/), and which sglang the interpreter actually imports.
import { readFileSync } from "node:fs";
import { sha256 } from "./bytes.js";
import {
  readRel,
  resolveSeriesDir,
  treeDrift,
  treeInfo,
  type CommonOptions,
  type TreeInfo,
} from "./context.js";
import { PatchError } from "./errors.js";
import { locateSglang, type SglangTree } from "./locate.js";
import { interpreterSglang, type InterpreterCheck } from "./python.js";
import { kvctlRoot } from "./repo.js";
import { loadSeries, placedFiles, type Series } from "./series.js";
import { staleLock, withLock } from "./lock.js";
import { readState, type PatchState } from "./state.js";
import { interruptedRun, recoverInterrupted } from "./txn.js";

export type PlacedState =
  | "ok" // tree copy equals the source
  | "outdated" // source in python/ changed since apply: re-run apply
  | "modified" // tree copy edited by hand since apply
  | "missing" // recorded but gone from the tree
  | "not-placed" // in the manifest but not in the tree (series not applied, or new source file)
  | "stale"; // in the tree from an earlier apply, but no longer in the manifest

export interface PlacedEntry {
  path: string;
  source: string | null;
  state: PlacedState;
}

export interface StatusOptions extends CommonOptions {
  /** Interpreter to ask which sglang it imports; default: the project venv, else python3. false: skip. */
  python?: string | false;
  env?: NodeJS.ProcessEnv;
  /** A running server's resolved server args (its /server_info): whether kvctl is on there. */
  serverArgs?: Record<string, unknown>;
}

/**
 * Whether kvctl does anything in a patched tree: a patched SGLang with no kvctl setting serves
 * exactly like an unpatched one ("applied, inactive"); --kv-control-nats-url or
 * --kv-control-config (or KVCTL_NATS_URL in the server's environment) turn it on ("active").
 */
export type KvctlActivation = "not applied" | "applied, inactive" | "active";

export interface StatusResult {
  tree: TreeInfo;
  series: { name: string; dir: string } | null;
  seriesError: string | null;
  state: {
    series: string;
    status: string;
    appliedAt: string;
    kvctlVersion: string;
    sglangVersion: string;
  } | null;
  patches: {
    name: string;
    state: "applied" | "not-applied" | "changed-since-apply" | "not-in-series";
  }[];
  files: { path: string; action: string; state: "ok" | "modified" | "missing" | "reappeared" }[];
  placed: PlacedEntry[];
  interpreter: InterpreterCheck | null;
  /** What status did first about an earlier apply/revert that was killed mid-write, if there was one. */
  recovered: string | null;
  /** Applied, no drift, placed files current, interpreter imports this tree (when asked). */
  clean: boolean;
  /** What the patches do at run time (from `serverArgs` when given, else the environment). */
  kvctl: KvctlActivation;
  messages: string[];
}

/** Placed files vs their sources. Only `ok` entries are in sync; tests can assert none else. */
export function placedDriftFor(
  parent: string,
  series: Series | null,
  state: PatchState | null,
): PlacedEntry[] {
  const out: PlacedEntry[] = [];
  const recorded = new Map(state?.placed.map((p) => [p.path, p]) ?? []);
  const seen = new Set<string>();
  for (const pf of series ? placedFiles(series) : []) {
    seen.add(pf.target);
    const rec = recorded.get(pf.target);
    const disk = readRel(parent, pf.target);
    const src = sha256(readFileSync(pf.sourceAbs));
    let st: PlacedState;
    if (!rec) st = disk !== null && sha256(disk) === src ? "ok" : "not-placed";
    else if (disk === null) st = "missing";
    else if (sha256(disk) !== rec.sha256) st = "modified";
    else st = rec.sha256 === src ? "ok" : "outdated";
    out.push({ path: pf.target, source: pf.source, state: st });
  }
  for (const rec of recorded.values()) {
    if (!seen.has(rec.path))
      out.push({
        path: rec.path,
        source: rec.source,
        state: readRel(parent, rec.path) === null ? "missing" : "stale",
      });
  }
  return out;
}

/** Placed files of the tree at `path` that are not in sync with the repo's sources (empty = in sync). */
export function placedDrift(path: string, opts: CommonOptions = {}): PlacedEntry[] {
  const tree = locateSglang(path, { sglangVersion: opts.sglangVersion });
  const series = loadSeries(resolveSeriesDir(tree, opts), opts.repoRoot ?? kvctlRoot());
  return placedDriftFor(tree.parent, series, readState(tree.parent)).filter(
    (e) => e.state !== "ok",
  );
}

export function seriesStatus(path: string, opts: StatusOptions = {}): StatusResult {
  const tree = locateSglang(path, { sglangVersion: opts.sglangVersion });
  // Status is read-only except here: a run killed mid-write is finished or undone first.
  const killed = interruptedRun(tree.parent) || staleLock(tree.pkg);
  const recovered = killed ? withLock(tree.pkg, () => recoverInterrupted(tree.parent)) : null;
  const state = readState(tree.parent);
  const { series, seriesError } = seriesOrError(tree, opts);
  const patches = patchStates(series, state);
  const messages = headerMessages(tree, recovered, seriesError, state, series, patches);
  const drift = state ? treeDrift(tree.parent, state) : [];
  const files: StatusResult["files"] = (state?.files ?? []).map((f) => {
    const d = drift.find((e) => e.path === f.path && e.kind === "patched");
    return { path: f.path, action: f.action, state: d ? d.problem : "ok" };
  });
  if (files.length) messages.push(`patched files:`);
  for (const f of files)
    messages.push(
      `  ${f.state === "ok" ? "ok" : f.state.toUpperCase()}`.padEnd(14) +
        ` ${f.path} (${f.action})`,
    );
  const placed = placedDriftFor(tree.parent, series, state);
  messages.push(...placedMessages(placed, state !== null));
  const interpreter =
    opts.python === false ? null : interpreterSglang(tree.pkg, opts.python, opts.env);
  if (interpreter) messages.push(interpreterMessage(interpreter));
  const applied =
    state?.status === "applied" &&
    patches.length > 0 &&
    patches.every((p) => p.state === "applied");
  const clean =
    applied &&
    drift.length === 0 &&
    placed.every((p) => p.state === "ok") &&
    (interpreter === null || interpreter.importsThisTree);
  const kvctl = activation(applied, opts.serverArgs, opts.env ?? process.env);
  messages.push(`kvctl: ${kvctl.state} (${kvctl.why})`);
  return {
    tree: treeInfo(tree),
    series: series ? { name: series.name, dir: series.dir } : null,
    seriesError,
    state: state && {
      series: state.series,
      status: state.status,
      appliedAt: state.appliedAt,
      kvctlVersion: state.kvctlVersion,
      sglangVersion: state.sglangVersion,
    },
    patches,
    files,
    placed,
    interpreter,
    recovered,
    clean,
    kvctl: kvctl.state,
    messages,
  };
}

/** The report's first lines: the tree, its version, the series and the state of each patch. */
function headerMessages(
  tree: SglangTree,
  recovered: string | null,
  seriesError: string | null,
  state: PatchState | null,
  series: Series | null,
  patches: StatusResult["patches"],
): string[] {
  const messages: string[] = [];
  if (recovered) messages.push(recovered);
  messages.push(
    `SGLang ${tree.version ?? "(unknown version)"} at ${tree.pkg} (${tree.layout}${tree.versionSource ? `, version from ${tree.versionSource}` : ""})`,
  );
  for (const w of tree.versionWarnings) messages.push(`warning: ${w}`);
  if (seriesError) messages.push(`series: ${seriesError}`);
  if (state) {
    messages.push(
      `state: series ${state.series} ${state.status === "applied" ? "applied" : "INTERRUPTED while applying"} ${state.appliedAt} by kvctl ${state.kvctlVersion}`,
    );
  } else messages.push(`state: no kvctl patches applied to this tree`);
  if (series) messages.push(`series ${series.name} (${series.dir}):`);
  for (const p of patches) messages.push(`  ${p.state.padEnd(20)} ${p.name}`);
  return messages;
}

function seriesOrError(
  tree: SglangTree,
  opts: StatusOptions,
): { series: Series | null; seriesError: string | null } {
  try {
    return {
      series: loadSeries(resolveSeriesDir(tree, opts), opts.repoRoot ?? kvctlRoot()),
      seriesError: null,
    };
  } catch (err) {
    if (!(err instanceof PatchError)) throw err;
    return { series: null, seriesError: err.message };
  }
}

/** Each patch of the series against the state file's record, and recorded ones the series dropped. */
function patchStates(series: Series | null, state: PatchState | null): StatusResult["patches"] {
  const recorded = new Map(state?.patches.map((p) => [p.name, p.sha256]) ?? []);
  const patches: StatusResult["patches"] = [];
  for (const p of series?.patches ?? []) {
    const r = recorded.get(p.name);
    patches.push({
      name: p.name,
      state: r === undefined ? "not-applied" : r === p.sha256 ? "applied" : "changed-since-apply",
    });
  }
  for (const p of state?.patches ?? [])
    if (!series?.patches.some((s) => s.name === p.name))
      patches.push({ name: p.name, state: "not-in-series" });
  return patches;
}

function placedMessages(placed: PlacedEntry[], applied: boolean): string[] {
  if (!placed.length) return [];
  const bad = placed.filter((p) => p.state !== "ok");
  const out = [
    `placed files: ${placed.length - bad.length}/${placed.length} in sync with their sources`,
  ];
  for (const p of bad)
    out.push(`  ${p.state.toUpperCase().padEnd(11)} ${p.path}${p.source ? ` <- ${p.source}` : ""}`);
  if (
    bad.some((p) => p.state === "outdated" || p.state === "not-placed" || p.state === "stale") &&
    applied
  ) {
    out.push(`  run 'kvctl patch apply' again to bring the placed files up to date`);
  }
  return out;
}

function interpreterMessage(interpreter: InterpreterCheck): string {
  if (!interpreter.ran) return `interpreter: ${interpreter.error}`;
  if (interpreter.sglangDir === null)
    return `interpreter ${interpreter.executable} cannot import sglang at all`;
  if (interpreter.importsThisTree)
    return `interpreter ${interpreter.executable} imports this tree (${interpreter.sglangDir})`;
  return `WARNING: interpreter ${interpreter.executable} imports ANOTHER sglang: ${interpreter.sglangDir}; a server started with it will not run the patched code (set PYTHONPATH or install the patched tree)`;
}

function setting(v: unknown): boolean {
  return v !== undefined && v !== null && v !== "";
}

function activation(
  applied: boolean,
  serverArgs: Record<string, unknown> | undefined,
  env: NodeJS.ProcessEnv,
): { state: KvctlActivation; why: string } {
  if (!applied) return { state: "not applied", why: "SGLang runs unpatched" };
  const on = (args: Record<string, unknown>) =>
    setting(args.kv_control_nats_url) || setting(args.kv_control_config);
  if (serverArgs) {
    return on(serverArgs)
      ? {
          state: "active",
          why: "the server runs with --kv-control-nats-url or --kv-control-config",
        }
      : {
          state: "applied, inactive",
          why: "the server has no kvctl setting: it serves exactly like unpatched SGLang",
        };
  }
  if (setting(env.KVCTL_NATS_URL))
    return { state: "active", why: "KVCTL_NATS_URL is set in this environment" };
  return {
    state: "applied, inactive",
    why: "inert until a server starts with --kv-control-nats-url or --kv-control-config; --server URL asks a running one",
  };
}

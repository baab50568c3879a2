// The lanes a run's configurations run on, each with a fleet process of its own (python -m
// kvctl_sim fleet), kept for the caller's next run (starting one costs seconds of SGLang imports).
// A lane runs its configuration's engine and front in the calling thread, or, threaded, in a
// worker thread of its own: a configuration's front (the agent policy, the index, routing) then
// no longer waits for another lane's, and the lanes' fronts spread over the machine's cores.
// Either way a configuration's run is the same: it is deterministic in the seed, and shares
// nothing with another lane's.
import { Worker } from "node:worker_threads";
import { type ConfigOutcome, type ConfigTask, runConfigTask } from "./config-run.js";
import { FleetClient, FleetError } from "./fleet-client.js";

type Line = (line: string) => void;

export interface Lane {
  /** The profile's reference and shape (FleetClient.profile). */
  profile(name: string): Promise<{ ref: unknown; shape: unknown }>;
  prefillTimes(profile: string, extend: number[], prefix: number[]): Promise<number[]>;
  run(task: ConfigTask, progress?: Line, log?: Line): Promise<ConfigOutcome>;
  close(): Promise<void>;
}

export interface LaneOptions {
  tree: string;
  /** Stderr lines of the fleet processes, and the fronts' log. */
  log?: Line;
  /** Each lane in a worker thread of its own (default: the calling thread). */
  threads?: boolean;
}

class LocalLane implements Lane {
  private readonly fleet: FleetClient;

  constructor(o: LaneOptions) {
    this.fleet = new FleetClient({ tree: o.tree, log: o.log });
  }

  profile(name: string) {
    return this.fleet.profile(name);
  }

  prefillTimes(profile: string, extend: number[], prefix: number[]) {
    return this.fleet.prefillTimes(profile, extend, prefix);
  }

  run(task: ConfigTask, progress?: Line, log?: Line) {
    return runConfigTask(task, this.fleet, progress, log);
  }

  close() {
    return this.fleet.close();
  }
}

/** What lane-thread.ts answers: a call's result or error, or a line for the caller. */
export type LaneReply =
  | { kind: "ok"; id: number; value: unknown }
  | { kind: "err"; id: number; error: { name: string; message: string; stack?: string } }
  | { kind: "line"; id: number; stream: "progress" | "log"; line: string };

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  progress?: Line;
  log?: Line;
}

/** A lane's front allocates a little for every event it handles: with a young generation of
 * kvctl's own size (bin/kvctl.js's semi-spaces of up to 64 MiB) most of it dies before a
 * scavenge, which then has less to copy. */
const resourceLimits = { maxYoungGenerationSizeMb: 192 };

/** The lane's thread, from src/ (tsx, whose loader a worker thread does not inherit) or dist/. */
function startThread(workerData: unknown): Worker {
  const here = import.meta.url;
  if (!here.endsWith(".ts"))
    return new Worker(new URL("./lane-thread.js", here), { workerData, resourceLimits });
  const tsx = JSON.stringify(import.meta.resolve("tsx/esm/api"));
  const entry = JSON.stringify(new URL("./lane-thread.ts", here).href);
  const boot = `import(${tsx}).then((m) => { m.register(); return import(${entry}); });`;
  return new Worker(boot, { eval: true, workerData, resourceLimits });
}

function revive(e: { name: string; message: string; stack?: string }): Error {
  const out = e.name === "FleetError" ? new FleetError(e.message) : new Error(e.message);
  if (e.stack) out.stack = e.stack;
  return out;
}

class ThreadLane implements Lane {
  private readonly thread: Worker;
  private readonly calls = new Map<number, Pending>();
  private seq = 0;
  private failed: Error | null = null;

  constructor(private readonly o: LaneOptions) {
    this.thread = startThread({ tree: o.tree, log: o.log !== undefined });
    this.thread.on("message", (m: LaneReply) => this.reply(m));
    this.thread.on("error", (e) => this.fail(e));
    this.thread.on("exit", (code) => this.fail(new Error(`a lane's thread exited (${code})`)));
  }

  private fail(e: Error): void {
    this.failed ??= e;
    for (const c of this.calls.values()) c.reject(e);
    this.calls.clear();
  }

  private reply(m: LaneReply): void {
    const c = this.calls.get(m.id);
    if (m.kind === "line") {
      (m.stream === "progress" ? c?.progress : (c?.log ?? this.o.log))?.(m.line);
      return;
    }
    this.calls.delete(m.id);
    if (m.kind === "ok") c?.resolve(m.value);
    else c?.reject(revive(m.error));
  }

  private call<T>(op: string, args: unknown, progress?: Line, log?: Line): Promise<T> {
    if (this.failed) return Promise.reject(this.failed);
    const id = ++this.seq;
    return new Promise<T>((resolve, reject) => {
      this.calls.set(id, { resolve: resolve as (v: unknown) => void, reject, progress, log });
      this.thread.postMessage({ id, op, args, progress: !!progress, log: !!log });
    });
  }

  profile(name: string) {
    return this.call<{ ref: unknown; shape: unknown }>("profile", { name });
  }

  prefillTimes(profile: string, extend: number[], prefix: number[]) {
    return this.call<number[]>("prefillTimes", { profile, extend, prefix });
  }

  run(task: ConfigTask, progress?: Line, log?: Line) {
    return this.call<ConfigOutcome>("run", task, progress, log);
  }

  async close(): Promise<void> {
    if (!this.failed) await this.call("close", null).catch(() => undefined);
    await this.thread.terminate();
  }
}

/** The run's lanes, started when first needed; each runs one configuration at a time (`init`
 * builds its workers afresh, clock at 0), so a run starts `parallel` of them, not one per
 * configuration, and runs one after another (the regime map's) can share them. */
export class FleetProcesses {
  private readonly lanes: (Lane | undefined)[] = [];

  constructor(private readonly o: LaneOptions) {}

  get(i: number): Lane {
    this.lanes[i] ??= this.o.threads ? new ThreadLane(this.o) : new LocalLane(this.o);
    return this.lanes[i];
  }

  async close(): Promise<void> {
    await Promise.all(this.lanes.map((l) => l?.close()));
  }
}

// The engine's side of the fleet process (python -m kvctl_sim fleet, python/kvctl_sim/): one per
// configuration. Frames go out on the child's fd 3 and come back on its fd 4, so its stdout and
// stderr stay logs. A frame is `u32 length | u32 json length | json | blob` (little-endian); the
// JSON names [offset, length] ranges of the blob for token ids and for bytes that must travel
// exactly (commands, acks, KV-event batches).
import { type ChildProcess, spawn } from "node:child_process";
import { tmpdir } from "node:os";
import type { Readable, Writable } from "node:stream";
import { patchedTreeEnv, venvPython } from "../paths.js";

export interface WorkerSpec {
  id: string;
  page_size: number;
  device_tokens: number;
  /** 0: no HiCache host tier. */
  host_tokens: number;
  chunked_prefill_size: number;
  session_radix: boolean;
  eviction: "lru" | "priority";
  kvctl: boolean;
  events: boolean;
  /** HiCache's L3: none, a store per worker, or one store for the fleet (python/kvctl_sim/storage.py). */
  storage: "none" | "worker" | "shared";
}

export type FleetInput =
  | {
      kind: "req";
      t: number;
      worker: string;
      rid: string;
      program: string;
      /** Tokens of the program's last sequence the prompt starts with. */
      keep: number;
      prompt: Int32Array;
      output: Int32Array;
      session: string | null;
    }
  | { kind: "command"; t: number; worker: string; cid: number; body: Uint8Array }
  | { kind: "close"; t: number; worker: string; session: string }
  | { kind: "forget"; program: string };

export type FleetEvent =
  | { kind: "first"; rid: string; t: number }
  | {
      kind: "finish";
      rid: string;
      t: number;
      cached: number;
      hostLoaded: number;
      computed: number;
      /** When the worker admitted it (matched its prefix and began its prefill). */
      admitted: number;
    }
  | { kind: "ack"; cid: number; t: number; body: Uint8Array };

export interface FleetFrame {
  worker: string;
  t: number;
  payload: Uint8Array;
}

export interface AdvanceResult {
  /** Everything that starts before this moment has run (null: the fleet is idle, nothing pending). */
  at: number | null;
  events: FleetEvent[];
  frames: FleetFrame[];
  busy: boolean;
}

export class FleetError extends Error {
  override name = "FleetError";
}

class Blob {
  parts: Uint8Array[] = [];
  size = 0;
  put(b: Uint8Array): [number, number] {
    const ref: [number, number] = [this.size, b.byteLength];
    this.parts.push(b);
    this.size += b.byteLength;
    return ref;
  }
}

function int32Bytes(a: Int32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

function encodeInputs(inputs: readonly FleetInput[], blob: Blob): unknown[] {
  return inputs.map((x) => {
    if (x.kind === "req")
      return [
        "req",
        x.t,
        x.worker,
        x.rid,
        x.program,
        x.keep,
        blob.put(int32Bytes(x.prompt)),
        blob.put(int32Bytes(x.output)),
        x.session,
      ];
    if (x.kind === "command") return ["command", x.t, x.worker, x.cid, blob.put(x.body)];
    if (x.kind === "close") return ["close", x.t, x.worker, x.session];
    return ["forget", x.program];
  });
}

type Reply = { json: Record<string, unknown>; blob: Buffer };

/** Reads whole frames off a stream, in order. */
class FrameReader {
  private buf: Buffer = Buffer.alloc(0);
  private waiters: ((r: Reply | Error) => void)[] = [];
  private ready: Reply[] = [];
  private failed: Error | null = null;

  constructor(stream: Readable) {
    stream.on("data", (d: Buffer) => this.feed(d));
  }

  fail(e: Error): void {
    this.failed ??= e;
    for (const w of this.waiters.splice(0)) w(e);
  }

  private feed(d: Buffer): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    while (this.buf.length >= 4) {
      const total = this.buf.readUInt32LE(0);
      if (this.buf.length < 4 + total) break;
      const jlen = this.buf.readUInt32LE(4);
      const json = JSON.parse(this.buf.toString("utf8", 8, 8 + jlen)) as Record<string, unknown>;
      const blob = this.buf.subarray(8 + jlen, 4 + total);
      this.buf = this.buf.subarray(4 + total);
      const w = this.waiters.shift();
      if (w) w({ json, blob });
      else this.ready.push({ json, blob });
    }
  }

  next(): Promise<Reply> {
    const r = this.ready.shift();
    if (r) return Promise.resolve(r);
    if (this.failed) return Promise.reject(this.failed);
    return new Promise((resolve, reject) =>
      this.waiters.push((x) => (x instanceof Error ? reject(x) : resolve(x))),
    );
  }
}

function slice(blob: Buffer, ref: unknown): Uint8Array {
  const [off, len] = ref as [number, number];
  return new Uint8Array(blob.buffer, blob.byteOffset + off, len).slice();
}

function decodeEvents(raw: unknown[], blob: Buffer): FleetEvent[] {
  return raw.map((e) => {
    const a = e as unknown[];
    if (a[0] === "first") return { kind: "first", rid: a[1] as string, t: a[2] as number };
    if (a[0] === "finish")
      return {
        kind: "finish",
        rid: a[1] as string,
        t: a[2] as number,
        cached: a[3] as number,
        hostLoaded: a[4] as number,
        computed: a[5] as number,
        admitted: a[6] as number,
      };
    return { kind: "ack", cid: a[1] as number, t: a[2] as number, body: slice(blob, a[3]) };
  });
}

export interface FleetOptions {
  /** The patched SGLang tree (directory holding `sglang/`). */
  tree: string;
  /** stderr lines of the fleet process (default: the last 8 KB are kept for errors). */
  log?: (line: string) => void;
}

export class FleetClient {
  private readonly child: ChildProcess;
  private readonly out: Writable;
  private readonly reader: FrameReader;
  private tail = "";

  constructor(o: FleetOptions) {
    const env = patchedTreeEnv(o.tree);
    this.child = spawn(venvPython, ["-m", "kvctl_sim", "fleet"], {
      cwd: tmpdir(),
      env,
      stdio: ["ignore", "inherit", "pipe", "pipe", "pipe"],
    });
    this.child.stderr?.on("data", (d: Buffer) => {
      const s = d.toString();
      this.tail = (this.tail + s).slice(-8000);
      if (o.log) for (const line of s.split("\n")) if (line.trim()) o.log(line);
    });
    this.out = this.child.stdio[3] as Writable;
    this.reader = new FrameReader(this.child.stdio[4] as Readable);
    this.child.once("exit", (code, sig) =>
      this.reader.fail(
        new FleetError(`the fleet process exited (${code ?? sig}):\n${this.tail.trim()}`),
      ),
    );
    this.out.on("error", () => undefined);
  }

  private async call(json: Record<string, unknown>, blob = new Blob()): Promise<Reply> {
    const js = Buffer.from(JSON.stringify(json), "utf8");
    const head = Buffer.alloc(8);
    head.writeUInt32LE(4 + js.length + blob.size, 0);
    head.writeUInt32LE(js.length, 4);
    this.out.write(Buffer.concat([head, js, ...blob.parts]));
    const r = await this.reader.next();
    if (r.json.ok !== true) throw new FleetError(`fleet: ${String(r.json.error)}`);
    return r;
  }

  /** The profile's reference and the SGLang settings it models (an unknown name: its error). */
  async profile(name: string): Promise<{ ref: unknown; shape: unknown }> {
    const r = await this.call({ op: "profile", profile: name });
    return { ref: r.json.ref, shape: r.json.shape };
  }

  /** The profile's prefill time (s) of each request alone: `extend[i]` new tokens after
   * `prefix[i]` cached ones. */
  async prefillTimes(profile: string, extend: number[], prefix: number[]): Promise<number[]> {
    const r = await this.call({ op: "prefill_times", profile, extend, prefix });
    return r.json.s as number[];
  }

  async init(profile: string, workers: readonly WorkerSpec[]): Promise<Record<string, unknown>> {
    const r = await this.call({ op: "init", profile, workers });
    return r.json.profile as Record<string, unknown>;
  }

  async advance(until: number | null, inputs: readonly FleetInput[]): Promise<AdvanceResult> {
    const blob = new Blob();
    const encoded = encodeInputs(inputs, blob);
    const r = await this.call({ op: "advance", until, inputs: encoded }, blob);
    const frames = (r.json.frames as unknown[][]).map((f) => ({
      worker: f[0] as string,
      t: f[1] as number,
      payload: slice(r.blob, f[2]),
    }));
    return {
      at: (r.json.at as number | null) ?? null,
      events: decodeEvents(r.json.events as unknown[], r.blob),
      frames,
      busy: r.json.busy === true,
    };
  }

  async stats(): Promise<{
    workers: Record<string, Record<string, unknown>>;
    cpuS: number;
    advances: number;
  }> {
    const r = await this.call({ op: "stats" });
    return {
      workers: r.json.workers as Record<string, Record<string, unknown>>,
      cpuS: r.json.cpu_s as number,
      advances: r.json.advances as number,
    };
  }

  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    try {
      await this.call({ op: "shutdown" });
    } catch {
      // it is going anyway
    }
    this.out.end();
    await new Promise<void>((resolve) => {
      if (this.child.exitCode !== null || this.child.signalCode !== null) return resolve();
      const timer = setTimeout(() => this.child.kill("SIGKILL"), 5000);
      this.child.once("exit", () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

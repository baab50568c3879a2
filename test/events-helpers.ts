// Shared helpers for the KV-events tests: SGLang's own publisher (python/oracles/
// kv_events_publisher.py, which runs the pinned release's ZmqEventPublisher) as a child process.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createInterface } from "node:readline";
import { join } from "node:path";
import { repoRoot, venvPython } from "./helpers/python.js";

export { freePort } from "../src/util/net.js";

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(cond: () => boolean, ms = 5000, what = "condition"): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    // The condition is the signal (state a socket callback sets); the pause only spaces the checks.
    await sleep(10);
  }
}

export class SglangPublisher {
  private proc!: ChildProcessWithoutNullStreams;
  private lines: string[] = [];
  private waiters: ((l: string) => void)[] = [];
  loaded = "";
  stderr = "";
  constructor(
    readonly endpoint: string,
    readonly replay?: string,
  ) {}

  async start(): Promise<this> {
    const args = [
      join(repoRoot, "python/oracles/kv_events_publisher.py"),
      "serve",
      "--endpoint",
      this.endpoint,
    ];
    if (this.replay) args.push("--replay", this.replay);
    this.proc = spawn(venvPython, args, { cwd: repoRoot });
    this.proc.stderr.on("data", (d) => (this.stderr += d));
    createInterface({ input: this.proc.stdout }).on("line", (l) => {
      const w = this.waiters.shift();
      if (w) w(l);
      else this.lines.push(l);
    });
    const ready = await this.next(20000);
    if (!ready.startsWith("READY")) throw new Error(`oracle said ${ready}: ${this.stderr}`);
    this.loaded = ready.slice(6);
    return this;
  }

  private next(ms = 10000): Promise<string> {
    const l = this.lines.shift();
    if (l !== undefined) return Promise.resolve(l);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`oracle silent: ${this.stderr}`)), ms);
      this.waiters.push((x) => {
        clearTimeout(t);
        resolve(x);
      });
    });
  }

  async cmd(c: object): Promise<string> {
    this.proc.stdin.write(JSON.stringify(c) + "\n");
    return this.next();
  }

  /**
   * Resolves once `count` subscriptions have reached the publisher (it runs on an XPUB socket):
   * from then on those subscribers get every batch. ZMQ drops what a publisher sends before a
   * subscription arrives, so tests wait for this instead of sleeping.
   */
  async waitSubscribers(count = 1, timeoutS = 60): Promise<void> {
    this.proc.stdin.write(
      JSON.stringify({ op: "wait_subscribers", count, timeout_s: timeoutS }) + "\n",
    );
    const reply = await this.next((timeoutS + 10) * 1000);
    if (!reply.startsWith("OK")) throw new Error(`publisher: ${reply}`);
  }

  publish(events: object[], ts?: number): Promise<string> {
    return this.cmd({ op: "publish", events, ...(ts === undefined ? {} : { ts }) });
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null) return;
    this.proc.stdin.write(JSON.stringify({ op: "quit" }) + "\n");
    await new Promise<void>((r) => {
      const t = setTimeout(() => {
        this.proc.kill();
        r();
      }, 5000);
      this.proc.on("exit", () => {
        clearTimeout(t);
        r();
      });
    });
  }
}

export function range(a: number, b: number): number[] {
  return Array.from({ length: b - a }, (_, i) => a + i);
}

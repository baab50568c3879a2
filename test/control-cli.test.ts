// The CLI end to end: `kvctl testing-worker` answers, `kvctl send` prints its ack (exact int64),
// `kvctl listen` sees the command, and bad flags exit 2 naming the flag.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeAck, parseJson } from "../src/protocol/index.js";
import { type NatsServer, startNatsServer } from "./helpers/nats-server.js";
import { repoRoot } from "./helpers/python.js";

const KVCTL = ["--import", "tsx", "src/cli/bin.ts"];
let server: NatsServer;
let worker: ChildProcess;

function kvctl(...args: string[]) {
  return spawnSync(process.execPath, [...KVCTL, ...args], {
    cwd: repoRoot,
    encoding: "utf8",
    timeout: 30_000,
  });
}

function waitFor(
  child: ChildProcess,
  stream: "stdout" | "stderr",
  pattern: RegExp,
): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    child[stream]!.on("data", (d: Buffer) => {
      text += d.toString();
      if (pattern.test(text)) resolve(text);
    });
    child.once("exit", (code) => reject(new Error(`exited ${code}: ${text}`)));
  });
}

beforeAll(async () => {
  server = await startNatsServer();
  worker = spawn(
    process.execPath,
    [
      ...KVCTL,
      "testing-worker",
      "--worker-id",
      "cli0",
      "--known-blocks",
      "111,-222",
      "--nats-url",
      server.url,
    ],
    { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
  );
  const banner = await waitFor(worker, "stderr", /answering as worker_id=cli0/);
  expect(banner).toContain("NOT the SGLang worker");
});

afterAll(async () => {
  worker?.kill("SIGTERM");
  await server?.stop();
});

describe("kvctl send / listen / testing-worker", () => {
  it("sends a command and prints the ack as exact JSON; listen sees it", async () => {
    const listen = spawn(
      process.execPath,
      [...KVCTL, "listen", "--nats-url", server.url, "--count", "1", "--json"],
      { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"] },
    );
    await waitFor(listen, "stderr", /listening on/);
    const r = kvctl(
      "send",
      "cli0",
      "Cache",
      "--block-hashes",
      "111,-222,-9223372036854775808",
      "--pin",
      "true",
      "--ttl-seconds",
      "300",
      "--json",
      "--nats-url",
      server.url,
    );
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const ack = decodeAck(r.stdout.trim());
    expect(ack).toMatchObject({
      worker_id: "cli0",
      type: "Cache",
      status: "partial",
      affected: 2,
      missing: [-9223372036854775808n],
    });
    const seen = await waitFor(listen, "stdout", /\n/);
    const line = parseJson(seen.trim()) as {
      subject: string;
      valid: boolean;
      message: { id: string; command: { block_hashes: unknown[] } };
    };
    expect(line.subject).toBe("kv-control-cli0");
    expect(line.valid).toBe(true);
    expect(line.message.id).toBe(ack.id);
    expect(line.message.command.block_hashes).toEqual([111, -222, -9223372036854775808n]);
  });

  it("exits 1 on a rejected ack and on no responders", () => {
    expect(
      kvctl("send", "cli0", "RevokeLease", "--lease-id", "nope", "--nats-url", server.url).status,
    ).toBe(1);
    const r = kvctl(
      "send",
      "ghost",
      "RevokeLease",
      "--lease-id",
      "x",
      "--retries",
      "0",
      "--nats-url",
      server.url,
    );
    expect(r.status).toBe(1);
    expect(r.stderr).toContain("NoRespondersError");
  });

  it("bad flags exit 2 and name the flag", () => {
    const cases: Array<[string[], string]> = [
      [["send", "cli0", "Cache", "--bogus", "1"], "--bogus"],
      [["send", "cli0", "Cache", "--lease-id", "x"], "--lease-id"],
      [
        ["send", "cli0", "Cache", "--block-hashes", "9223372036854775808", "--pin", "true"],
        "--block-hashes",
      ],
      [
        ["send", "cli0", "Cache", "--block-hashes", "1", "--pin", "true", "--ttl-seconds", "0"],
        "--ttl-seconds",
      ],
      [["send", "cli0", "Cache", "--block-hashes", "1", "--pin", "maybe"], "--pin"],
      [["send", "cli0", "Evict"], "Evict"],
      [["listen", "--count", "x"], "--count"],
      [["testing-worker"], "--worker-id"],
    ];
    for (const [args, flag] of cases) {
      const r = kvctl(...args, "--nats-url", server.url);
      expect(r.status, args.join(" ")).toBe(2);
      expect(r.stderr, args.join(" ")).toContain(flag);
    }
  });
});

// kvctl verify-hashes (offline against SGLang's own hashing; live against SGLang's own
// ZmqEventPublisher from the pinned release, python/oracles/kv_events_publisher.py) and kvctl watch.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { InMemoryKvIndex } from "../src/index/index.js";
import { encodeBatch } from "../src/events/encode.js";
import type { BlockStoredEvent } from "../src/events/types.js";
import { hasVenv, repoRoot } from "./helpers/python.js";
import { freePort, range, sleep, SglangPublisher } from "./events-helpers.js";
import { blockStored } from "./helpers/kv-events.js";

const A0 = 905019192701563378n;
const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanup.length) await (cleanup.pop() as () => Promise<void>)().catch(() => undefined);
});

function cli(args: string[]) {
  const p = spawn(
    process.execPath,
    ["--import", "tsx", join(repoRoot, "src/cli/bin.ts"), ...args],
    { cwd: repoRoot },
  );
  const lines: string[] = [];
  let err = "";
  p.stderr.on("data", (d) => (err += d));
  const rl = createInterface({ input: p.stdout });
  rl.on("line", (l) => lines.push(l));
  const done = new Promise<number>((r) => p.on("exit", (code) => r(code ?? -1)));
  const exited = new Promise<void>((r) => rl.on("close", () => r()));
  cleanup.push(async () => void (p.exitCode === null && p.kill()));
  return {
    lines,
    interrupt: () => p.kill("SIGINT"),
    stderr: () => err,
    code: async () => {
      const c = await done;
      await exited;
      return c;
    },
    async waitLine(re: RegExp, ms = 20000) {
      const end = Date.now() + ms;
      while (!lines.some((l) => re.test(l))) {
        if (Date.now() > end) throw new Error(`no line ${re}: ${lines.join("\n")}\n${err}`);
        await sleep(20);
      }
    },
  };
}

describe.skipIf(!hasVenv)("kvctl verify-hashes", () => {
  it("offline: SGLang's own hashing and the addon agree over the corpus (exit 0)", async () => {
    const r = cli(["verify-hashes"]);
    expect(await r.code()).toBe(0);
    expect(r.lines.at(-1)).toBe("verdict: MATCH");
    expect(r.lines.join("\n")).toMatch(
      /SGLang 0\.5\.23 vs addon: \d+ cases, \d+ pages, 0 mismatching/,
    );
  }, 180_000);

  it("live: matches coalesced and chained stores, flags a tampered one with its first differing page (exit 1)", async () => {
    const port = await freePort();
    const py = await new SglangPublisher(`tcp://127.0.0.1:${port}`).start();
    cleanup.push(() => py.stop());
    const v = cli(["verify-hashes", "--zmq", `tcp://127.0.0.1:${port}`, "--events", "5"]);
    await v.waitLine(/listening/);
    await py.waitSubscribers(); // the CLI's subscription reached the publisher: nothing is dropped
    await py.publish([{ type: "BlockStored", tokens: range(1, 193), page: 64 }]); // 3 pages, coalesced
    await py.publish([
      { type: "BlockStored", tokens: range(5000, 5064), page: 64, parent: A0.toString() },
    ]); // child of page 0
    await py.publish([
      { type: "BlockStored", tokens: range(1, 65), page: 64, cache_salt: "tenant-a" },
    ]); // salted chain
    await py.publish([{ type: "BlockStored", tokens: range(7, 71), page: 64, parent: "12345" }]); // parent never seen
    // hashes that do not match the tokens: page 1 is wrong
    await py.publish([
      { type: "BlockStored", tokens: range(1, 129), page: 64, hashes: [A0.toString(), "42"] },
    ]);
    expect(await v.code()).toBe(1);
    const out = v.lines.join("\n");
    expect(out).toMatch(/seq 0 BlockStored 3 page\(s\) \[905019192701563378, \.\.\.\] GPU: match/);
    expect(out).toMatch(/seq 1 BlockStored 1 page\(s\) .*: match/);
    expect(out).toMatch(/seq 2 BlockStored 1 page\(s\) .*: match/);
    expect(out).toMatch(/seq 3 .*unverifiable \(parent not seen\)/);
    expect(out).toMatch(/seq 4 .*MISMATCH at page 1: worker 42, tokens give -1602537780942439135/);
    expect(out).toMatch(/3 matched, 1 mismatched, 1 unverifiable/);
    expect(v.lines.at(-1)).toBe("verdict: MISMATCH");
  }, 180_000);

  it("live: all matching -> exit 0; nothing received -> exit 2", async () => {
    const port = await freePort();
    const py = await new SglangPublisher(`tcp://127.0.0.1:${port}`).start();
    cleanup.push(() => py.stop());
    const v = cli([
      "verify-hashes",
      "--zmq",
      `tcp://127.0.0.1:${port}`,
      "--events",
      "1",
      "--quiet",
    ]);
    await v.waitLine(/listening/);
    await py.waitSubscribers(); // the CLI's subscription reached the publisher: nothing is dropped
    await py.publish([
      { type: "BlockStored", tokens: range(1, 129), page: 64, medium: "CPU_PINNED" },
    ]);
    expect(await v.code()).toBe(0);
    expect(v.lines.at(-1)).toBe("verdict: MATCH");
    const empty = cli([
      "verify-hashes",
      "--zmq",
      `tcp://127.0.0.1:${await freePort()}`,
      "--duration",
      "1",
    ]);
    expect(await empty.code()).toBe(2);
    expect(empty.lines.at(-1)).toBe("verdict: NOTHING RECEIVED");
  }, 180_000);
});

describe.skipIf(!hasVenv)("kvctl watch", () => {
  it("shows per-worker per-tier counts from SGLang's publisher", async () => {
    const port = await freePort();
    const py = await new SglangPublisher(`tcp://127.0.0.1:${port}`).start();
    cleanup.push(() => py.stop());
    const w = cli(["watch", "--zmq", `w1=tcp://127.0.0.1:${port}`, "--interval", "0.2", "--json"]);
    await py.waitSubscribers(); // the watcher's subscription reached the publisher
    await py.publish([{ type: "BlockStored", tokens: range(1, 193), page: 64 }]);
    await py.publish([
      { type: "BlockStored", tokens: range(1, 129), page: 64, medium: "CPU_PINNED" },
    ]);
    await w.waitLine(/"events":2\b/); // a table that has both batches
    w.interrupt(); // SIGINT: one last table, then exit 0
    expect(await w.code()).toBe(0);
    const last = JSON.parse(w.lines.at(-1) as string);
    expect(last.workers[0]).toMatchObject({
      worker: "w1",
      GPU: 3,
      CPU_PINNED: 2,
      DISK: 0,
      EXTERNAL: 0,
      events: 2,
      seq: 1,
      gaps: 0,
    });
    const text = cli(["watch", "--zmq", `tcp://127.0.0.1:${port}`, "--once", "--interval", "0.2"]);
    expect(await text.code()).toBe(0);
    expect(text.lines[1]).toMatch(/^worker\s+GPU\s+CPU_PINNED\s+DISK\s+EXTERNAL\s+ev\/s/);
  }, 180_000);
});

describe("index dual key, verified natively", () => {
  it("keeps the token-derived hash beside the engine's and flags a mismatch", () => {
    const idx = new InMemoryKvIndex({ verify: true });
    const ev = (hashes: bigint[], parent: bigint | null, tokens: number[]): BlockStoredEvent =>
      blockStored({
        blockHashes: hashes,
        parentBlockHash: parent,
        tokenIds: tokens,
        blockSize: 64,
      });
    const apply = (e: BlockStoredEvent) =>
      idx.applyFrame("w", encodeBatch({ ts: 1, dpRank: 0, events: [e] }));
    expect(apply(ev([A0], null, range(1, 65)))).toMatchObject({ hashMismatches: 0, verified: 1 });
    expect(idx.lookup(A0)?.tokenHash).toBe(A0);
    // child chained from A0's digest: tokens 65..128 -> the second page of 1..128
    expect(apply(ev([-1602537780942439135n], A0, range(65, 129)))).toMatchObject({
      hashMismatches: 0,
      verified: 1,
    });
    expect(apply(ev([77n], -1602537780942439135n, range(200, 264))).hashMismatches).toBe(1);
    expect(idx.lookup(77n)?.tokenHash).not.toBe(77n);
  });
});

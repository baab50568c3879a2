// Several REAL patched SGLang servers on CPU: broadcast to two with a third (never started)
// silent; every command over SGLang's own HTTP app (the /hicache and /session routes); a worker
// restarted on the same `file` storage dir warms a session back from L3; a subscriber given a
// NATS URL nobody answers logs one clear line and the server keeps serving.
import { mkdtempSync, rmSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectControlPlane, ControlPublisher } from "../src/control/index.js";
import { blockHashes, storageKeys } from "../src/hash/index.js";
import { type Ack, decodeAck, stringifyJson } from "../src/protocol/index.js";
import { freePort } from "../src/util/net.js";
import { startNatsServer, type NatsServer } from "./helpers/nats-server.js";
import { generate, type SglangServer, startSglangServer, tokens } from "./helpers/sglang-server.js";

const PAGE = 16;
const A = "fleet-a";
const B = "fleet-b";
const hashesOf = (toks: number[]) => Array.from(blockHashes(toks, { pageSize: PAGE }));

const A2_ADMIN = "fleet-a2-admin-key-0123";

async function http(
  server: SglangServer,
  path: string,
  body: Record<string, unknown>,
  adminKey?: string,
): Promise<{ code: number; ack: Ack }> {
  const r = await fetch(`${server.baseUrl}${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(adminKey ? { authorization: `Bearer ${adminKey}` } : {}),
    },
    body: stringifyJson(body),
  });
  return { code: r.status, ack: decodeAck(await r.text()) };
}

describe("real SGLang servers: broadcast, HTTP front door, warm after restart, bad NATS URL", () => {
  let nats: NatsServer;
  let storageDir: string;
  let a: SglangServer | undefined;
  let b: SglangServer;
  let nc: NatsConnection;
  let pub: ControlPublisher;

  beforeAll(async () => {
    nats = await startNatsServer();
    storageDir = mkdtempSync(join(tmpdir(), "kvctl-fleet-l3-"));
    [a, b] = await Promise.all([
      startSglangServer({
        natsUrl: nats.url,
        workerId: A,
        pageSize: PAGE,
        maxTotalTokens: 1024,
        storageDir,
      }),
      // No admin key on this test server: its kvctl HTTP routes are served only with --kvctl-http-open.
      startSglangServer({
        natsUrl: nats.url,
        workerId: B,
        pageSize: PAGE,
        maxTotalTokens: 1024,
        storageDir: "",
        extraArgs: ["--kvctl-http-open"],
      }),
    ]);
    nc = await connectControlPlane({
      servers: nats.url,
      name: "kvctl-real-fleet",
      reconnectTimeWaitMs: 100,
    });
    pub = new ControlPublisher(nc, { timeoutMs: 15_000, retries: 1, workers: [A, B] });
  }, 1_000_000);

  afterAll(async () => {
    await nc?.close();
    await Promise.all([a?.stop(), b?.stop()]);
    await nats?.stop();
    if (storageDir) rmSync(storageDir, { recursive: true, force: true });
  }, 180_000);

  it("broadcast reaches both real servers once and names the silent third", async () => {
    const s = tokens(10, 48);
    await Promise.all([
      generate(a!.baseUrl, [...s, 1000], 2),
      generate(b.baseUrl, [...s, 1000], 2),
    ]);
    const hs = hashesOf(s);
    const ghost = "fleet-ghost";
    const r = await pub.broadcast(
      { type: "Cache", block_hashes: hs, pin: true, ttl_seconds: 60 },
      { deadlineMs: 5000, workers: [A, B, ghost] },
    );
    expect(r.acks.map((x) => x.worker_id).sort()).toEqual([A, B]);
    expect(r.acks.every((x) => x.status === "applied" && x.affected === 3 && x.id === r.id)).toBe(
      true,
    );
    expect(r.silent).toEqual([ghost]);
    const un = await pub.broadcast(
      { type: "Cache", block_hashes: hs, pin: false },
      { deadlineMs: 5000 },
    );
    expect(un.acks.map((x) => x.status)).toEqual(["applied", "applied"]);
    expect(un.silent).toEqual([]);
  });

  it("every command over SGLang's HTTP app answers the Ack; tool offload through HTTP restores device hits", async () => {
    const s = tokens(100, 64);
    const next = [...s, ...tokens(900, 8)];
    const fresh = await generate(b.baseUrl, next, 6);
    const hs = hashesOf(s);
    const pin = await http(b, "/hicache/pin_blocks", { block_hashes: hs });
    expect(pin).toMatchObject({
      code: 200,
      ack: { type: "Cache", status: "applied", affected: 4, worker_id: B },
    });
    const ins = await http(b, "/hicache/inspect", { block_hashes: hs });
    expect(ins.ack.status).toBe("applied");
    expect(ins.ack.tiers.GPU).toBe(4);
    expect((await http(b, "/hicache/unpin_blocks", { block_hashes: hs })).ack.status).toBe(
      "applied",
    );
    expect(
      (await http(b, "/hicache/cache", { block_hashes: hs, pin: true, ttl_seconds: 30 })).ack
        .status,
    ).toBe("applied");
    expect(
      (await http(b, "/hicache/command", { type: "Cache", block_hashes: hs, pin: false })).ack
        .status,
    ).toBe("applied");

    const start = await http(b, "/session/tool_start", {
      session_id: "http-tool",
      block_hashes: hs,
    });
    expect(start.ack.status).toBe("applied");
    const meta = await http(b, "/session/kv_meta", { session_id: "http-tool", block_hashes: hs });
    expect(meta.ack.tiers).toEqual({ CPU_PINNED: 4 });
    expect(meta.ack.epoch).toBe(start.ack.epoch);
    const end = await http(b, "/session/tool_end", {
      session_id: "http-tool",
      epoch: start.ack.epoch,
    });
    expect(end.ack.status).toBe("applied");
    const after = await generate(b.baseUrl, next, 6);
    expect(after.meta_info.cached_tokens_details).toMatchObject({ device: 64, host: 0 });
    expect(after.output_ids).toEqual(fresh.output_ids);

    const pause = await http(b, "/hicache/pause", {
      block_hashes: hs,
      ttl_seconds: 60,
      lease_id: "http-lease",
    });
    expect(pause.ack.status).toBe("applied");
    expect(
      (await http(b, "/hicache/renew_lease", { lease_id: "http-lease", new_ttl_seconds: 120 })).ack
        .status,
    ).toBe("applied");
    const resumed = await generate(b.baseUrl, next, 6);
    expect(resumed.meta_info.cached_tokens_details).toMatchObject({ device: 0, host: 64 });
    expect(resumed.output_ids).toEqual(fresh.output_ids);
    expect(["applied", "partial"]).toContain(
      (await http(b, "/hicache/revoke_lease", { lease_id: "http-lease" })).ack.status,
    );

    const branch = [...s, ...tokens(300, 32)];
    await generate(b.baseUrl, [...branch, 1000], 2);
    const prune = await http(b, "/hicache/prune", { after_block_hash: hashesOf(branch)[3] });
    expect(prune.ack.status).toBe("applied");
    const think = await http(b, "/hicache/think", {
      block_hashes: hashesOf(branch).slice(4),
      transient: false,
    });
    expect(think.ack.status).not.toBe("error");

    const bad = await http(b, "/hicache/warm", {
      block_keys: ["a".repeat(64)],
      target_tier: "CPU_TIER1",
    });
    expect(bad.code).toBe(400);
    expect(bad.ack.status).toBe("rejected");
    const bad2 = await http(b, "/hicache/cache", { block_hashes: [1], pin: true, ttl_second: 5 });
    expect(bad2.code).toBe(400);
    expect(bad2.ack.reason).toMatch(/ttl_second/);
  });

  it("Warm: a restarted worker (bad NATS URL: one clear log line, still serving) takes a session back from the file backend", async () => {
    const s = tokens(500, 64);
    const next = [...s, ...tokens(910, 8)];
    const fresh = await generate(a!.baseUrl, next, 6);
    const hs = hashesOf(s);
    const p = await pub.send(A, {
      type: "Pause",
      block_hashes: hs,
      ttl_seconds: 60,
      lease_id: "warm-src",
    });
    expect(p.status).toBe("applied");
    const keys = storageKeys(s, { pageSize: PAGE });
    await a!.stop(); // the worker goes away; its pages stay in the file backend
    a = undefined;

    const deadPort = await freePort(); // nothing listens here
    const a2 = await startSglangServer({
      workerId: "fleet-a2",
      pageSize: PAGE,
      maxTotalTokens: 1024,
      storageDir,
      // Its kvctl HTTP routes behind an admin key (no --api-key: generation stays open).
      extraArgs: [
        "--kv-control-nats-url",
        `nats://127.0.0.1:${deadPort}`,
        "--kv-control-worker-id",
        "fleet-a2",
        "--admin-api-key",
        A2_ADMIN,
      ],
    });
    a = a2;
    // the subscriber says once, clearly, that it cannot reach that NATS URL; the server serves on
    const natsLines = async () =>
      (await readFile(a2.info.log_path, "utf8"))
        .split("\n")
        .filter((l) => /kvctl subscriber/.test(l) && l.includes(`127.0.0.1:${deadPort}`));
    await expect
      .poll(async () => (await natsLines()).length, { timeout: 60_000, interval: 250 })
      .toBeGreaterThanOrEqual(1);
    expect((await natsLines())[0]).toMatch(/cannot reach NATS/);

    const before = await http(a2, "/hicache/inspect", { block_hashes: hs }, A2_ADMIN);
    expect(before.ack.missing).toEqual(hs);
    const w = await http(
      a2,
      "/hicache/warm",
      { block_keys: keys, token_ids: s, target_tier: "CPU_TIER1" },
      A2_ADMIN,
    );
    expect(w.ack.status).toBe("applied");
    expect((await http(a2, "/hicache/inspect", { block_hashes: hs }, A2_ADMIN)).ack.tiers).toEqual({
      CPU_PINNED: 4,
    });
    const warmed = await generate(a2.baseUrl, next, 6);
    expect(warmed.meta_info.cached_tokens).toBe(64);
    expect(warmed.meta_info.cached_tokens_details).toMatchObject({ device: 0, host: 64 });
    expect(warmed.output_ids).toEqual(fresh.output_ids);
    expect(await natsLines()).toHaveLength(1); // one line for the outage, not one per retry
  }, 600_000);
});

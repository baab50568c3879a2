// A session's turn and a worker whose device pool cannot hold it beside what runs there: with
// `routing.sessionYieldsWhenFull` (the agent policy's default) the turn is routed like a new one
// instead of queueing behind the requests in flight on its worker; without it, it waits there.
import { describe, expect, it } from "vitest";
import { parseGatewayConfig } from "../src/gateway/config/load.js";
import {
  routeRequest,
  type RoutingOptions,
  type WorkerState,
} from "../src/gateway/workers/router.js";
import { InFlightKv } from "../src/gateway/workers/in-flight-kv.js";
import { applyEvent, InMemoryKvIndex } from "../src/index/index.js";
import { blockStored } from "./helpers/kv-events.js";

const PAGE = 4;
const hashes = Array.from({ length: 10 }, (_, i) => BigInt(100 + i));

/** w0 holds the session's 10 blocks on device; w1 holds none. */
function overlap() {
  const idx = new InMemoryKvIndex();
  applyEvent(
    idx,
    "w0",
    blockStored({
      blockHashes: hashes,
      tokenIds: Array.from({ length: hashes.length * PAGE }, (_, i) => i),
      blockSize: PAGE,
    }) as never,
  );
  return idx.overlap(hashes);
}

/** w0 runs one request of `busyTokens` prompt tokens; each worker's device pool is `deviceTokens`. */
function workers(busyTokens: number, deviceTokens: number | undefined): WorkerState[] {
  const w = (id: string, inFlight: number, tokens: number): WorkerState => ({
    id,
    inFlight,
    inFlightPromptTokens: tokens,
    stale: false,
    pageSize: PAGE,
    deviceTokens,
  });
  return [w("w0", busyTokens ? 1 : 0, busyTokens), w("w1", 0, 0)];
}

const opts = (sessionYieldsWhenFull: boolean): RoutingOptions => ({
  cacheThreshold: 0.3,
  balanceAbsThreshold: 64,
  balanceRelThreshold: 1.5,
  sessionAffinityTtlSeconds: 600,
  sessionYieldsWhenFull,
  scoring: {},
});

const route = (busy: number, yields: boolean, deviceTokens: number | null = 64) =>
  routeRequest(
    {
      workers: workers(busy, deviceTokens ?? undefined),
      overlap: overlap(),
      session: { worker: "w0", lastActivityMs: 0 },
      nowMs: 1000,
    },
    opts(yields),
    () => 0,
  );

describe("routing: a session's turn its worker cannot hold now", () => {
  it("moves when the prompts in flight there and its own pass the device pool", () => {
    // 48 tokens in flight + the turn's 40 > 64: w0 would queue it until its request ends. The
    // cache scoring then weighs w0's prefix (10 blocks) against the 12 blocks in flight there.
    expect(route(48, true)).toMatchObject({ worker: "w1", reason: "cache" });
    // The same state with the rule off: the turn waits for its worker.
    expect(route(48, false)).toMatchObject({ worker: "w0", reason: "session" });
  });

  it("stays when it fits beside what runs there, when nothing runs there, or when the pool is unknown", () => {
    expect(route(24, true)).toMatchObject({ worker: "w0", reason: "session" }); // 24 + 40 <= 64
    expect(route(0, true)).toMatchObject({ worker: "w0", reason: "session" });
    expect(route(48, true, null)).toMatchObject({ worker: "w0", reason: "session" });
  });
});

/**
 * w0 runs one request whose prompt is `shared` of the turn's blocks (its first ones, the tenant's
 * system prompt) and `own` blocks of its own, counted into w0's in-flight KV as a call does.
 */
function routeBeside(shared: number, own: number) {
  const kv = new InFlightKv();
  const inFlight = [
    ...hashes.slice(0, shared),
    ...Array.from({ length: own }, (_, i) => BigInt(200 + i)),
  ];
  kv.enter(inFlight, inFlight.length * PAGE, PAGE);
  return routeWith(kv, inFlight.length * PAGE);
}

/** The turn of `hashes` routed, w0 (its session's worker) holding `kv` with `inFlightTokens`. */
function routeWith(kv: InFlightKv, inFlightTokens: number) {
  const ws = workers(inFlightTokens, 64).map((w) => (w.id === "w0" ? { ...w, inFlightKv: kv } : w));
  return routeRequest(
    {
      workers: ws,
      overlap: overlap(),
      session: { worker: "w0", lastActivityMs: 0 },
      nowMs: 1000,
      prompt: { tokens: hashes.length * PAGE, blocksOn: () => hashes },
    },
    opts(true),
    () => 0,
  );
}

describe("routing: what a turn adds beside the prompts in flight on its worker", () => {
  it("stays when the prefix it shares with a request in flight there is held once and the rest fits", () => {
    // 12 blocks in flight, 8 of them the turn's first: 12 + 2 new = 14 blocks (56 tokens) <= 64.
    // Counted per request (48 + 40 tokens) it would have moved.
    expect(routeBeside(8, 4)).toMatchObject({ worker: "w0", reason: "session" });
  });

  it("moves when the blocks in flight there and its own do not fit, shared or not", () => {
    // 12 blocks in flight, none the turn's: 12 + 10 = 22 blocks (88 tokens) > 64.
    expect(routeBeside(0, 12)).toMatchObject({ worker: "w1", reason: "cache" });
    // 8 shared and 8 of its own: 16 + 2 = 18 blocks (72 tokens) > 64.
    expect(routeBeside(8, 8)).toMatchObject({ worker: "w1", reason: "cache" });
  });

  it("counts a prompt out once, whatever shares its blocks", () => {
    const kv = new InFlightKv();
    const a = kv.enter([1n, 2n, 3n], 14, 4);
    const b = kv.enter([1n, 2n], 8, 4);
    // 3 distinct blocks and a's 2 tokens past its last page.
    expect(kv.tokensWith(null, 0, 4)).toBe(14);
    expect(kv.tokensWith([1n, 2n, 9n], 13, 4)).toBe(14 + 4 + 1);
    a();
    a();
    expect(kv.tokensWith(null, 0, 4)).toBe(8);
    expect(kv.promptTokens).toBe(8);
    b();
    expect(kv.blocks).toBe(0);
    expect(kv.tokensWith(null, 0, 4)).toBe(0);
  });
});

describe("routing: the answers in flight", () => {
  it("counts each call in flight and the turn as adding an answer as long as the recent ones", () => {
    const kv = new InFlightKv();
    kv.answered(8);
    kv.answered(16);
    expect(kv.expectedAnswer).toBe(12);
    const leave = kv.enter([1n, 2n], 8, 4);
    // 2 blocks and the call's answer (12), then the turn's 2 new blocks and its answer (12).
    expect(kv.tokensWith([1n, 9n, 10n], 12, 4)).toBe(8 + 12 + 8 + 12);
    // A call counts out the answer it was counted in with, whatever came since.
    kv.answered(40);
    leave();
    expect(kv.tokensWith(null, 0, 4)).toBe(kv.expectedAnswer);
  });

  it("moves a turn that fits by its prompt but not beside the answer being decoded there", () => {
    // 8 shared and 4 own blocks in flight, 2 new: 56 tokens, which fit 64; with the answers
    // expected of the call in flight and of the turn (8 tokens each), 72 do not.
    const kv = new InFlightKv();
    kv.answered(8);
    const inFlight = [...hashes.slice(0, 8), 200n, 201n, 202n, 203n];
    kv.enter(inFlight, inFlight.length * PAGE, PAGE);
    const d = routeWith(kv, inFlight.length * PAGE);
    expect(d).toMatchObject({ worker: "w1", reason: "cache" });
  });
});

describe("the agent policy's routing default", () => {
  const workersCfg = [{ id: "w0", url: "http://127.0.0.1:1" }];
  it("turns sessionYieldsWhenFull on under the agent policy unless the configuration names it", () => {
    expect(
      parseGatewayConfig({ workers: workersCfg, policy: "agent" }).routing.sessionYieldsWhenFull,
    ).toBe(true);
    expect(
      parseGatewayConfig({
        workers: workersCfg,
        policy: "agent",
        routing: { sessionYieldsWhenFull: false, cacheThreshold: 0.5 },
      }).routing,
    ).toMatchObject({ sessionYieldsWhenFull: false, cacheThreshold: 0.5 });
    expect(parseGatewayConfig({ workers: workersCfg }).routing.sessionYieldsWhenFull).toBe(false);
    expect(
      parseGatewayConfig({ workers: workersCfg, policy: "noop" }).routing.sessionYieldsWhenFull,
    ).toBe(false);
  });

  it("names the field when it is not a boolean", () => {
    expect(() =>
      parseGatewayConfig({
        workers: workersCfg,
        policy: "agent",
        routing: { sessionYieldsWhenFull: "yes" },
      }),
    ).toThrow(/routing\.sessionYieldsWhenFull/);
  });
});

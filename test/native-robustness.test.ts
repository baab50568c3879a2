// Garbage in, JS errors out: the addon and the TS API check everything and never abort.
import { describe, expect, it } from "vitest";
import { loadAddon } from "../src/addon.js";
import {
  HashInputError,
  blockHashes,
  dynamoBlockHashes,
  mooncakeObjectKeysForStorageKeys,
  sglangPageHashesBatch,
  sglangPageHashesGpu,
  storageKeys,
} from "../src/hash/index.js";

const native = loadAddon();

function detached(): Uint32Array {
  const buf = new ArrayBuffer(64);
  const view = new Uint32Array(buf);
  structuredClone(buf, { transfer: [buf] });
  return view;
}

describe("native addon survives garbage", () => {
  const garbage: unknown[] = [undefined, null, 0, -1, 1.5, NaN, "abc", 10n, {}, [], [1, 2], () => 1, Symbol("x"), new Float64Array(4), new Int32Array(4), new Uint8Array(3), detached()];

  it.each([
    ["sglangChain", (g: unknown) => (native.sglangChain as (...a: unknown[]) => unknown)(g, null, 16, false, null)],
    ["sglangChain offsets", (g: unknown) => (native.sglangChain as (...a: unknown[]) => unknown)(new Uint32Array(8), g, 4)],
    ["sglangChain pageSize", (g: unknown) => (native.sglangChain as (...a: unknown[]) => unknown)(new Uint32Array(8), null, g)],
    ["sglangChain prior", (g: unknown) => (native.sglangChain as (...a: unknown[]) => unknown)(new Uint32Array(8), null, 4, false, g)],
    ["sglangChainCuda", (g: unknown) => (native.sglangChainCuda as (...a: unknown[]) => unknown)(g, null, 16)],
    ["digestsToInt64", (g: unknown) => (native.digestsToInt64 as (...a: unknown[]) => unknown)(g, null)],
    ["digestsToHex", (g: unknown) => (native.digestsToHex as (...a: unknown[]) => unknown)(g)],
    ["namespacedBlockHashes", (g: unknown) => (native.namespacedBlockHashes as (...a: unknown[]) => unknown)(g, g)],
    ["namespaceSeed", (g: unknown) => (native.namespaceSeed as (...a: unknown[]) => unknown)(g, g, g)],
    ["cacheSaltSeed", (g: unknown) => (native.cacheSaltSeed as (...a: unknown[]) => unknown)(g)],
    ["mooncakeObjectKeys", (g: unknown) => (native.mooncakeObjectKeys as (...a: unknown[]) => unknown)(new Uint8Array(32), g)],
    ["xxh3", (g: unknown) => (native.xxh3 as (...a: unknown[]) => unknown)(g, g)],
    ["dynamoHashes", (g: unknown) => (native.dynamoHashes as (...a: unknown[]) => unknown)(g, null, 4, false, g)],
    ["sha256", (g: unknown) => (native.sha256 as (...a: unknown[]) => unknown)(g)],
    ["setSha256Backend", (g: unknown) => (native.setSha256Backend as (...a: unknown[]) => unknown)(g)],
  ])("%s: every garbage argument is a thrown JS error or a valid result", (_name, call) => {
    for (const g of garbage) {
      try {
        call(g);
      } catch (err) {
        expect(err).toBeInstanceOf(Error);
        expect((err as Error).message.length).toBeGreaterThan(5);
      }
    }
  });

  it("no arguments at all", () => {
    for (const fn of Object.values(native) as ((...a: unknown[]) => unknown)[]) {
      try {
        fn();
      } catch (err) {
        expect(err).toBeInstanceOf(Error);
      }
    }
  });

  it("detached ArrayBuffers are refused by name", () => {
    expect(() => native.sglangChain(detached(), null, 4, false, null)).toThrow(/tokens: its ArrayBuffer is detached/);
    expect(() => native.sglangChain(new Uint32Array(8), detached(), 4, false, null)).toThrow(/offsets: its ArrayBuffer is detached/);
  });

  it("applyFrames names the payload it refuses, by its place in the list", () => {
    type Raw = { applyFrames(slots: Uint32Array, payloads: unknown[], out: Float64Array): unknown };
    const idx = new (native as unknown as { KvBlockIndex: new (o: object) => Raw }).KvBlockIndex({});
    const out = new Float64Array(48);
    const frame = new Uint8Array([0x93, 0x00, 0x90, 0x00]); // [0, [], 0]: no events
    expect(() => idx.applyFrames(new Uint32Array([0, 1, 2]), [frame, new Uint16Array(4), frame], out)).toThrow(
      /payloads\[1\] must be a Uint8Array or Buffer/,
    );
    const gone = new ArrayBuffer(8);
    const view = new Uint8Array(gone);
    structuredClone(gone, { transfer: [gone] });
    expect(() => idx.applyFrames(new Uint32Array([0, 1]), [frame, view], out)).toThrow(/payloads\[1\]: its ArrayBuffer is detached/);
    expect(idx.applyFrames(new Uint32Array([0, 1, 2]), [frame, frame, frame], out)).toBeNull();
  });

  it("offsets out of range, decreasing, empty; huge page sizes and ranks", () => {
    const t = new Uint32Array(16);
    expect(() => native.sglangChain(t, new Uint32Array([0, 17]), 4, false, null)).toThrow(/offsets\[1\] = 17 is past the end/);
    expect(() => native.sglangChain(t, new Uint32Array([0, 8, 4]), 4, false, null)).toThrow(/non-decreasing/);
    expect(() => native.sglangChain(t, new Uint32Array([]), 4, false, null)).toThrow(/offsets must have at least one entry/);
    expect(() => native.sglangChain(t, new Uint32Array([0, 0xffffffff]), 4, false, null)).toThrow(RangeError);
    expect(() => native.sglangChain(t, null, 2 ** 40, false, null)).toThrow(/pageSize/);
    expect(() => native.sglangChain(t, null, 4, false, new Uint8Array(31))).toThrow(/prior must be exactly 32 bytes/);
    expect(() => native.digestsToHex(new Uint8Array(33))).toThrow(/multiple of 32/);
    expect(() => native.mooncakeObjectKeys(new Uint8Array(32), { tpRank: 1e12 })).toThrow(/layout.tpRank/);
    expect(() => native.dynamoHashes(t, null, 4, false, -1n as bigint)).toThrow(/seed/);
  });

  it("a zero-length batch is fine", () => {
    const r = native.sglangChain(new Uint32Array(0), new Uint32Array([0]), 4, false, null);
    expect(r.digests.length).toBe(0);
    expect(Array.from(r.pageOffsets)).toEqual([0]);
  });
});

describe("hash API errors name the argument", () => {
  const expectArg = (f: () => unknown, argument: string, re: RegExp) => {
    try {
      f();
    } catch (err) {
      expect(err).toBeInstanceOf(HashInputError);
      expect((err as HashInputError).argument).toBe(argument);
      expect((err as Error).message).toMatch(re);
      return;
    }
    throw new Error("expected a HashInputError");
  };

  it("bad tokens", () => {
    expectArg(() => storageKeys([1, 2.5], { pageSize: 1 }), "tokens[1]", /integer/);
    expectArg(() => storageKeys([1, 2 ** 32], { pageSize: 1 }), "tokens[1]", /\[0, 2\^32\)/);
    expectArg(() => storageKeys([-1], { pageSize: 1 }), "tokens[0]", /\[0, 2\^32\)/);
    expectArg(() => storageKeys(["1"] as unknown as number[], { pageSize: 1 }), "tokens[0]", /integer/);
    expectArg(() => storageKeys("123" as unknown as number[], { pageSize: 1 }), "tokens", /Uint32Array or an array/);
    expectArg(() => blockHashes([1, NaN], { pageSize: 1 }), "tokens[1]", /integer/);
  });

  it("bad options", () => {
    expectArg(() => storageKeys([1], { pageSize: 0 }), "options.pageSize", />= 1/);
    expectArg(() => storageKeys([1], { pageSize: -4 }), "options.pageSize", />= 1/);
    expectArg(() => storageKeys([1], { pageSize: 1.5 }), "options.pageSize", /integer/);
    expectArg(() => storageKeys([1], { pageSize: 1, prior: "zz" }), "options.prior", /hex|bytes/);
    expectArg(() => storageKeys([1], { pageSize: 1, pagesize: 2 } as never), "options", /pagesize|key/i);
    expectArg(() => dynamoBlockHashes([1], { blockSize: 0 }), "options.blockSize", />= 1/);
    expectArg(() => blockHashes([1], { pageSize: 1, eventFormat: "vllm" as never }), "options.eventFormat", /./);
    expectArg(() => mooncakeObjectKeysForStorageKeys(["abc"]), "keys[0]", /64 lowercase hex/);
  });

  it("mismatched offsets", () => {
    expectArg(() => sglangPageHashesBatch({ tokens: new Uint32Array(4), offsets: new Uint32Array([0, 5]) }, { pageSize: 1 }), "batch.offsets[1]", /past the end/);
    expectArg(() => sglangPageHashesBatch({ tokens: new Uint32Array(4), offsets: new Uint32Array([0, 3, 2]) }, { pageSize: 1 }), "batch.offsets[2]", /non-decreasing/);
    expectArg(() => sglangPageHashesBatch({ tokens: new Uint32Array(4), offsets: [0, 4] as never }, { pageSize: 1 }), "batch.offsets", /Uint32Array/);
    expectArg(() => sglangPageHashesBatch([[1], [2, -3]], { pageSize: 1 }), "sequences[1][1]", /\[0, 2\^32\)/);
  });

  it("GPU path without CUDA is a clean error", () => {
    const info = native.cudaInfo();
    if (info.available) return; // a CUDA host: test/gpu covers it
    expect(() => sglangPageHashesGpu([[1, 2, 3, 4]], { pageSize: 2 })).toThrow(/^CUDA unavailable: /);
  });
});

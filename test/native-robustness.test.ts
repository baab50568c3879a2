// Garbage in, JS errors out: the addon and the TS API check everything and never abort. A call
// that does not throw must return the value the same call returns with sane arguments.
import { createHash } from "node:crypto";
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
  const garbage: unknown[] = [
    undefined,
    null,
    0,
    -1,
    1.5,
    NaN,
    "abc",
    10n,
    {},
    [],
    [1, 2],
    () => 1,
    Symbol("x"),
    new Float64Array(4),
    new Int32Array(4),
    new Uint8Array(3),
    detached(),
  ];
  const call = (name: string, ...args: unknown[]) =>
    (native[name as keyof typeof native] as (...a: unknown[]) => unknown)(...args);
  // What a call that accepts a garbage argument must return: the result of the same call with the
  // argument it stands for (a missing offsets/prior is "none", an options-like value is the
  // defaults, a string salt and a byte array are data). Anything else accepted is a failure.
  const chain8 = call("sglangChain", new Uint32Array(8), null, 4, false, null);
  const defaultKeys = call("mooncakeObjectKeys", new Uint8Array(32), {});
  const never = () => false;
  const equals = (want: unknown) => (got: unknown) => {
    expect(got).toEqual(want);
    return true;
  };

  it.each<[string, (g: unknown) => unknown, (got: unknown, g: unknown) => boolean]>([
    ["sglangChain", (g) => call("sglangChain", g, null, 16, false, null), never],
    ["sglangChain offsets", (g) => call("sglangChain", new Uint32Array(8), g, 4), equals(chain8)],
    ["sglangChain pageSize", (g) => call("sglangChain", new Uint32Array(8), null, g), never],
    [
      "sglangChain prior",
      (g) => call("sglangChain", new Uint32Array(8), null, 4, false, g),
      equals(chain8),
    ],
    ["sglangChainCuda", (g) => call("sglangChainCuda", g, null, 16), never],
    ["digestsToInt64", (g) => call("digestsToInt64", g, null), never],
    ["digestsToHex", (g) => call("digestsToHex", g), never],
    ["namespacedBlockHashes", (g) => call("namespacedBlockHashes", g, g), never],
    ["namespaceSeed", (g) => call("namespaceSeed", g, g, g), never],
    [
      "cacheSaltSeed",
      (g) => call("cacheSaltSeed", g),
      (got, g) => typeof g === "string" && equals(call("cacheSaltSeed", String(g)))(got),
    ],
    [
      "mooncakeObjectKeys",
      (g) => call("mooncakeObjectKeys", new Uint8Array(32), g),
      equals(defaultKeys),
    ],
    ["xxh3", (g) => call("xxh3", g, g), never],
    ["dynamoHashes", (g) => call("dynamoHashes", g, null, 4, false, g), never],
    [
      "sha256",
      (g) => call("sha256", g),
      (got, g) => g instanceof Uint8Array && equals(createHash("sha256").update(g).digest())(got),
    ],
    ["setSha256Backend", (g) => call("setSha256Backend", g), never],
  ])(
    "%s: every garbage argument is a thrown JS error or the result it stands for",
    (_name, fn, valid) => {
      let thrown = 0;
      for (const g of garbage) {
        let got: unknown;
        try {
          got = fn(g);
        } catch (err) {
          expect(err).toBeInstanceOf(Error);
          expect((err as Error).message.length).toBeGreaterThan(5);
          thrown++;
          continue;
        }
        expect(valid(got, g), `accepted ${Object.prototype.toString.call(g)}`).toBe(true);
      }
      expect(thrown).toBeGreaterThan(0);
    },
  );

  it("no arguments at all: a JS error, or the value of a function that takes none", () => {
    const takesNone: Record<string, (r: unknown) => boolean> = {
      sha256Backend: (r) => r === "sha-ni" || r === "portable",
      dynamoSeed: (r) => typeof r === "bigint",
      cudaInfo: (r) => typeof (r as { available?: unknown }).available === "boolean",
      buildInfo: (r) => typeof (r as { cuda?: { built?: unknown } }).cuda?.built === "boolean",
      threadCpuTimeUs: (r) => typeof r === "number" && r >= 0,
      intRunPath: (r) => typeof r === "string" && r.length > 0,
    };
    let thrown = 0;
    for (const [name, fn] of Object.entries(native) as [string, (...a: unknown[]) => unknown][]) {
      let got: unknown;
      try {
        got = fn();
      } catch (err) {
        expect(err, name).toBeInstanceOf(Error);
        thrown++;
        continue;
      }
      expect(takesNone[name]?.(got) ?? false, `${name}() returned ${String(got)}`).toBe(true);
    }
    expect(thrown).toBeGreaterThan(10);
  });

  it("detached ArrayBuffers are refused by name", () => {
    expect(() => native.sglangChain(detached(), null, 4, false, null)).toThrow(
      /tokens: its ArrayBuffer is detached/,
    );
    expect(() => native.sglangChain(new Uint32Array(8), detached(), 4, false, null)).toThrow(
      /offsets: its ArrayBuffer is detached/,
    );
  });

  it("applyFrames names the payload it refuses, by its place in the list", () => {
    type Raw = { applyFrames(slots: Uint32Array, payloads: unknown[], out: Float64Array): unknown };
    const idx = new (native as unknown as { KvBlockIndex: new (o: object) => Raw }).KvBlockIndex(
      {},
    );
    const out = new Float64Array(48);
    const frame = new Uint8Array([0x93, 0x00, 0x90, 0x00]); // [0, [], 0]: no events
    expect(() =>
      idx.applyFrames(new Uint32Array([0, 1, 2]), [frame, new Uint16Array(4), frame], out),
    ).toThrow(/payloads\[1\] must be a Uint8Array or Buffer/);
    const gone = new ArrayBuffer(8);
    const view = new Uint8Array(gone);
    structuredClone(gone, { transfer: [gone] });
    expect(() => idx.applyFrames(new Uint32Array([0, 1]), [frame, view], out)).toThrow(
      /payloads\[1\]: its ArrayBuffer is detached/,
    );
    expect(idx.applyFrames(new Uint32Array([0, 1, 2]), [frame, frame, frame], out)).toBeNull();
  });

  it("offsets out of range, decreasing, empty; huge page sizes and ranks", () => {
    const t = new Uint32Array(16);
    expect(() => native.sglangChain(t, new Uint32Array([0, 17]), 4, false, null)).toThrow(
      /offsets\[1\] = 17 is past the end/,
    );
    expect(() => native.sglangChain(t, new Uint32Array([0, 8, 4]), 4, false, null)).toThrow(
      /non-decreasing/,
    );
    expect(() => native.sglangChain(t, new Uint32Array([]), 4, false, null)).toThrow(
      /offsets must have at least one entry/,
    );
    expect(() => native.sglangChain(t, new Uint32Array([0, 0xffffffff]), 4, false, null)).toThrow(
      RangeError,
    );
    expect(() => native.sglangChain(t, null, 2 ** 40, false, null)).toThrow(/pageSize/);
    expect(() => native.sglangChain(t, null, 4, false, new Uint8Array(31))).toThrow(
      /prior must be exactly 32 bytes/,
    );
    expect(() => native.digestsToHex(new Uint8Array(33))).toThrow(/multiple of 32/);
    expect(() => native.mooncakeObjectKeys(new Uint8Array(32), { tpRank: 1e12 })).toThrow(
      /layout.tpRank/,
    );
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
    expectArg(
      () => storageKeys(["1"] as unknown as number[], { pageSize: 1 }),
      "tokens[0]",
      /integer/,
    );
    expectArg(
      () => storageKeys("123" as unknown as number[], { pageSize: 1 }),
      "tokens",
      /Uint32Array or an array/,
    );
    expectArg(() => blockHashes([1, NaN], { pageSize: 1 }), "tokens[1]", /integer/);
  });

  it("bad options", () => {
    expectArg(() => storageKeys([1], { pageSize: 0 }), "options.pageSize", />= 1/);
    expectArg(() => storageKeys([1], { pageSize: -4 }), "options.pageSize", />= 1/);
    expectArg(() => storageKeys([1], { pageSize: 1.5 }), "options.pageSize", /integer/);
    expectArg(() => storageKeys([1], { pageSize: 1, prior: "zz" }), "options.prior", /hex|bytes/);
    expectArg(
      () => storageKeys([1], { pageSize: 1, pagesize: 2 } as never),
      "options",
      /pagesize|key/i,
    );
    expectArg(() => dynamoBlockHashes([1], { blockSize: 0 }), "options.blockSize", />= 1/);
    expectArg(
      () => blockHashes([1], { pageSize: 1, eventFormat: "vllm" as never }),
      "options.eventFormat",
      /./,
    );
    expectArg(() => mooncakeObjectKeysForStorageKeys(["abc"]), "keys[0]", /64 lowercase hex/);
  });

  it("mismatched offsets", () => {
    expectArg(
      () =>
        sglangPageHashesBatch(
          { tokens: new Uint32Array(4), offsets: new Uint32Array([0, 5]) },
          { pageSize: 1 },
        ),
      "batch.offsets[1]",
      /past the end/,
    );
    expectArg(
      () =>
        sglangPageHashesBatch(
          { tokens: new Uint32Array(4), offsets: new Uint32Array([0, 3, 2]) },
          { pageSize: 1 },
        ),
      "batch.offsets[2]",
      /non-decreasing/,
    );
    expectArg(
      () =>
        sglangPageHashesBatch(
          { tokens: new Uint32Array(4), offsets: [0, 4] as never },
          { pageSize: 1 },
        ),
      "batch.offsets",
      /Uint32Array/,
    );
    expectArg(
      () => sglangPageHashesBatch([[1], [2, -3]], { pageSize: 1 }),
      "sequences[1][1]",
      /\[0, 2\^32\)/,
    );
  });

  it("the GPU path is the CPU's digests on a CUDA host and a clean error without one", () => {
    const seqs = [
      [1, 2, 3, 4],
      [5, 6],
    ];
    if (native.cudaInfo().available)
      expect(sglangPageHashesGpu(seqs, { pageSize: 2 })).toEqual(
        sglangPageHashesBatch(seqs, { pageSize: 2 }),
      );
    else expect(() => sglangPageHashesGpu(seqs, { pageSize: 2 })).toThrow(/^CUDA unavailable: /);
  });
});

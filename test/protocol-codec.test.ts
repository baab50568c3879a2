// The int64-exact JSON codec: full signed 64-bit range, byte-for-byte round trips, and Python's
// `json` module (the worker side's reader) agreeing with every byte.
import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  decodeAck,
  decodeBody,
  encodeAck,
  encodeEnvelope,
  INT64_MAX,
  INT64_MIN,
  makeEnvelope,
  parseJson,
  stringifyJson,
  validateCommand,
  blankAck,
} from "../src/protocol/index.js";
import { hasVenv, venvPython } from "./helpers/python.js";

function randomInt64s(n: number): bigint[] {
  const buf = randomBytes(8 * n);
  return Array.from({ length: n }, (_, i) => buf.readBigInt64LE(8 * i));
}

const EDGES = [
  INT64_MIN,
  INT64_MAX,
  INT64_MIN + 1n,
  INT64_MAX - 1n,
  0n,
  -1n,
  1n,
  2n ** 53n,
  2n ** 53n + 1n,
  -(2n ** 53n) - 1n,
  9007199254740991n,
  -9007199254740991n,
];

describe("int64 JSON codec", () => {
  it("round-trips -2^63, 2^63-1 and random values byte-for-byte", () => {
    const values = [...EDGES, ...randomInt64s(2000)];
    const text = stringifyJson(values);
    expect(text.startsWith("[-9223372036854775808,9223372036854775807,")).toBe(true);
    const back = parseJson(text) as Array<number | bigint>;
    expect(back.map((v) => BigInt(v))).toEqual(values);
    expect(stringifyJson(back)).toBe(text);
    // Every literal in the text is exactly the decimal of the value.
    expect(text.slice(1, -1).split(",")).toEqual(values.map((v) => v.toString()));
  });

  it("keeps unsafe integers exact (bigint) and safe ones as numbers", () => {
    expect(parseJson("9007199254740993")).toBe(9007199254740993n);
    expect(parseJson("-9223372036854775808")).toBe(INT64_MIN);
    expect(parseJson("9007199254740991")).toBe(9007199254740991);
    expect(parseJson("[1.5,-0,1e3]")).toEqual([1.5, -0, 1000]);
    // JSON.parse rounds this one to ...808 (outside int64); we keep it exact.
    expect(BigInt(JSON.parse("9223372036854775807"))).not.toBe(INT64_MAX);
    expect(parseJson("9223372036854775807")).toBe(INT64_MAX);
  });

  it("parses the rest of JSON like JSON.parse", () => {
    const samples = [
      '{"a":[1,2,{"b":"c\\n\\u00e9\\"x"}],"d":null,"e":true,"f":false}',
      "  [ ]  ",
      "{}",
      '"\\ud83d\\ude00"',
      '{"__proto__":1}',
    ];
    for (const s of samples) expect(parseJson(s)).toEqual(JSON.parse(s));
    expect(Object.getPrototypeOf(parseJson('{"__proto__":{"x":1}}'))).toBe(Object.prototype);
  });

  it("reads every number JSON.parse reads as JSON.parse does, leading zero included (0.5 once failed)", () => {
    const literals = [
      "0",
      "-0",
      "0.5",
      "-0.25",
      "0e1",
      "0E-3",
      "0.0",
      "-0.0e+2",
      "10",
      "1.5e3",
      "-2E-7",
      "123456789012345",
      "-999999999999999.5",
    ];
    const rand = new Float64Array(randomBytes(8 * 2000).buffer).filter(Number.isFinite);
    for (const x of rand) literals.push(String(x), String(Math.abs(x) % 1), String(x % 1e6));
    // Integer literals past 2^53 are the one intended difference: they stay exact, as bigint.
    const exact = (t: string) =>
      /^-?\d+$/.test(t) && !Number.isSafeInteger(JSON.parse(t)) ? BigInt(t) : JSON.parse(t);
    for (const t of literals) expect(Object.is(parseJson(t), exact(t)), t).toBe(true);
    expect(parseJson(`[${literals.join(",")}]`)).toEqual(literals.map(exact));
  });

  it("rejects malformed JSON with a position", () => {
    for (const bad of [
      "",
      "[1,]",
      '{"a":1,}',
      "01",
      "-",
      "1.",
      "[1 2]",
      "{'a':1}",
      "nul",
      '"abc',
      "[1]x",
      '"\t"',
    ]) {
      expect(() => parseJson(bad), bad).toThrow(/position/);
    }
    expect(() => parseJson(new Uint8Array([0x22, 0xff, 0x22]))).toThrow(/UTF-8/);
    expect(() => parseJson("[".repeat(100) + "]".repeat(100))).toThrow(/too deep/);
  });

  it("refuses to write NaN, Infinity, functions", () => {
    expect(() => stringifyJson(Number.NaN)).toThrow();
    expect(() => stringifyJson([Infinity])).toThrow();
    expect(() => stringifyJson(() => 1)).toThrow();
  });

  it("an envelope and an ack survive encode -> decode exactly", () => {
    const hashes = [...EDGES, ...randomInt64s(64)];
    const env = makeEnvelope(
      validateCommand({ type: "Cache", block_hashes: hashes, pin: true, ttl_seconds: 300 }),
    );
    const text = encodeEnvelope(env);
    const d = decodeBody(new TextEncoder().encode(text));
    expect(d.ok && d.command).toEqual(env.command);
    const ack = {
      ...blankAck("w0", env.id, "Cache", "partial"),
      requested: 3,
      affected: 2,
      missing: [INT64_MIN, INT64_MAX],
      reason: "pin budget exhausted (4096/4096 host tokens)",
      tiers: { GPU: 0, CPU_PINNED: 2 },
      elapsed_us: 412,
    };
    const ackText = encodeAck(ack);
    expect(decodeAck(ackText)).toEqual(ack);
    expect(encodeAck(decodeAck(ackText))).toBe(ackText);
  });
});

describe.skipIf(!hasVenv)("Python json reads what the codec writes", () => {
  // Python reads our bytes, checks values against its own big integers, and writes them back with
  // compact separators; the bytes must be identical both ways.
  const script = `
import json, sys
data = sys.stdin.buffer.read()
obj = json.loads(data)
edges = obj["edges"]
assert edges[0] == -2**63 and edges[1] == 2**63 - 1, edges[:2]
assert all(isinstance(v, int) for v in obj["values"]), "non-int value"
assert all(-2**63 <= v < 2**63 for v in obj["values"])
out = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
sys.stdout.buffer.write(out)
`;

  it("byte-for-byte, over edges and random values, envelopes and acks", () => {
    const values = randomInt64s(5000);
    const env = makeEnvelope(
      validateCommand({ type: "ToolStart", session_id: "s-1", block_hashes: values.slice(0, 100) }),
    );
    const doc = {
      edges: EDGES,
      values,
      envelope: parseJson(encodeEnvelope(env)),
      ack: parseJson(
        encodeAck({
          ...blankAck("w0", env.id, "Cache", "partial"),
          missing: [INT64_MIN, INT64_MAX],
          reason: 'budget é \u2603 "q"',
        }),
      ),
    };
    const text = stringifyJson(doc);
    const r = spawnSync(venvPython, ["-c", script], {
      input: text,
      encoding: "utf8",
      maxBuffer: 64 << 20,
    });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(text);
    // And the other way: what Python wrote decodes to the same bigints.
    const back = parseJson(r.stdout) as { values: Array<number | bigint> };
    expect(back.values.map((v) => BigInt(v))).toEqual(values);
  });

  it("Python-written envelopes with big ints and decimal strings decode exactly", () => {
    const py = `
import json
cmd = {"type": "Cache", "block_hashes": [-2**63, 2**63 - 1, "-6917529027641081856", 111], "pin": True}
print(json.dumps({"version": 1, "id": "0193a6c8-5a7e-7c1e-9a61-3b9f8f1f2a10", "issued_at_ms": 1732230000000, "command": cmd}))
`;
    const r = spawnSync(venvPython, ["-c", py], { encoding: "utf8" });
    expect(r.status).toBe(0);
    const d = decodeBody(r.stdout.trim());
    expect(d.ok).toBe(true);
    if (d.ok && d.command.type === "Cache")
      expect(d.command.block_hashes).toEqual([INT64_MIN, INT64_MAX, -6917529027641081856n, 111n]);
  });
});

describe("fast int64 <-> decimal paths agree with BigInt exactly", () => {
  it("on edges, powers of two and ten, and 200 000 random values", async () => {
    const { int64ToDecimal, int64FromDecimalParts, int64FromHeadTail } = await import(
      "../src/protocol/int64-decimal.js"
    );
    const values = [...EDGES, ...randomInt64s(200_000)];
    for (let e = 0n; e < 63n; e++) values.push(2n ** e, -(2n ** e), 2n ** e - 1n, -(2n ** e) + 1n);
    for (let e = 0n; e < 19n; e++)
      values.push(10n ** e, -(10n ** e), 10n ** e - 1n, -(10n ** e) + 1n);
    for (const v of values) {
      const text = v.toString();
      expect(int64ToDecimal(v)).toBe(text);
      const digits = text.replace("-", "");
      if (digits.length >= 16) {
        const hi = Number(digits.slice(0, -15));
        const lo = Number(digits.slice(-15));
        expect(int64FromDecimalParts(hi, lo, v < 0n)).toBe(v);
        const head = Number(digits.slice(0, 15));
        const tailDigits = digits.slice(15);
        expect(int64FromHeadTail(head, 10 ** tailDigits.length, Number(tailDigits), v < 0n)).toBe(
          v,
        );
      }
      expect(parseJson(text)).toBe(
        Number.isSafeInteger(Number(v)) && BigInt(Number(v)) === v ? Number(v) : v,
      );
    }
    // Just outside the range: refused by the fast path, kept exact by the parser.
    expect(int64FromDecimalParts(9223, 372036854775808, false)).toBeNull();
    expect(int64FromDecimalParts(9223, 372036854775809, true)).toBeNull();
    expect(int64FromDecimalParts(9999, 999999999999999, true)).toBeNull();
    expect(int64FromHeadTail(922337203685477, 10000, 5808, false)).toBeNull();
    expect(int64FromHeadTail(922337203685477, 10000, 5808, true)).toBe(-(2n ** 63n));
    expect(parseJson("[-0,0,-9007199254740992,9007199254740993,1000000000000000]")).toEqual([
      -0,
      0,
      -(2n ** 53n),
      2n ** 53n + 1n,
      1e15,
    ]);
    expect(parseJson("9223372036854775808")).toBe(2n ** 63n);
    expect(parseJson("-9223372036854775809")).toBe(-(2n ** 63n) - 1n);
    expect(parseJson("99999999999999999999")).toBe(99999999999999999999n);
    expect(stringifyJson([2n ** 64n, -(2n ** 70n)])).toBe(`[${2n ** 64n},${-(2n ** 70n)}]`);
  });
});

describe("the byte encoder writes exactly what the string encoder writes", () => {
  it("for every example command and random hash lists", async () => {
    const { encodeEnvelopeBytes, EXAMPLE_COMMANDS } = await import("../src/protocol/index.js");
    const text = new TextDecoder();
    const envs = Object.values(EXAMPLE_COMMANDS).map((c) => makeEnvelope(validateCommand(c)));
    for (let k = 0; k < 200; k++)
      envs.push(
        makeEnvelope(
          validateCommand({
            type: "Cache",
            block_hashes: [...EDGES, ...randomInt64s(k * 10)],
            pin: k % 2 === 0,
            ttl_seconds: k % 3 ? null : 1 + k,
          }),
        ),
      );
    const powers: bigint[] = [];
    for (let e = 0n; e < 63n; e++) powers.push(2n ** e, -(2n ** e), 2n ** e - 1n, 1n - 2n ** e);
    for (let e = 0n; e < 19n; e++)
      powers.push(10n ** e, -(10n ** e), 10n ** e - 1n, 1n - 10n ** e, 10n ** e + 1n);
    envs.push(
      makeEnvelope(validateCommand({ type: "Think", block_hashes: powers, transient: true })),
    );
    envs.push(
      makeEnvelope(
        validateCommand({ type: "Pause", block_hashes: [], ttl_seconds: null, lease_id: 'q"\\x' }),
      ),
      makeEnvelope(
        validateCommand({ type: "ToolEnd", session_id: "s", epoch: 9007199254740991 }),
        "id-1",
        0,
      ),
    );
    for (const env of envs) expect(text.decode(encodeEnvelopeBytes(env))).toBe(encodeEnvelope(env));
    // Unusual values it may be handed outside a validated envelope still come out the same.
    const odd = {
      version: 1,
      id: "é\u2603\n",
      issued_at_ms: 1.5,
      command: {
        type: "X",
        a: [2n ** 64n, -0, 1e21, "é", null, true, { b: undefined, c: -(2n ** 63n) }],
      },
    };
    expect(text.decode(encodeEnvelopeBytes(odd as never))).toBe(encodeEnvelope(odd as never));
  });

  it("for acks, including non-ASCII reasons, leases and extra keys", async () => {
    const { encodeAckBytes } = await import("../src/protocol/index.js");
    const text = new TextDecoder();
    const acks = [
      blankAck("w0", null, null, "rejected"),
      {
        ...blankAck("w-1", "0193a6c8-5a7e-7c1e-9a61-3b9f8f1f2a10", "Pause", "partial"),
        requested: 3,
        affected: 2,
        skipped: 1,
        missing: [INT64_MIN, INT64_MAX, 0n, ...randomInt64s(50)],
        reason: 'budget é \u2603 "q" \n',
        tiers: { GPU: 0, CPU_PINNED: 2 },
        lease: { lease_id: "l-1", expires_at_ms: 1732230000000 },
        epoch: 7,
        elapsed_us: 412,
      },
      { ...blankAck("w0", "x", "Inspect", "applied"), report: { blocks: [1n, -2n], note: "ok" } },
    ];
    for (const ack of acks)
      expect(text.decode(encodeAckBytes(ack as never))).toBe(encodeAck(ack as never));
  });
});

// Schemas: every command encodes and decodes to itself, bare commands decode, and every kind of
// bad input is refused with the offending field named (before it leaves the publisher, and by the
// decoder a worker runs).
import { describe, expect, it } from "vitest";
import {
  AckSchema,
  COMMAND_TYPES,
  CommandValidationError,
  decodeAck,
  decodeBody,
  encodeEnvelope,
  EXAMPLE_COMMANDS,
  isUuidv7,
  makeEnvelope,
  MAX_LIST_ENTRIES,
  uuidv7,
  uuidv7Time,
  validateCommand,
  workerSubject,
  broadcastSubject,
  parseControlSubject,
} from "../src/protocol/index.js";

function rejectionField(body: unknown): string {
  const d = decodeBody(typeof body === "string" ? body : JSON.stringify(body));
  if (d.ok) throw new Error(`accepted: ${JSON.stringify(body)}`);
  return d.error.field;
}

function validationField(cmd: unknown): string {
  try {
    validateCommand(cmd);
  } catch (e) {
    if (e instanceof CommandValidationError) return e.field;
    throw e;
  }
  throw new Error(`accepted: ${String(cmd)}`);
}

describe("commands", () => {
  it.each(COMMAND_TYPES)("%s round-trips through an envelope", (type) => {
    const cmd = EXAMPLE_COMMANDS[type];
    const env = makeEnvelope(validateCommand(cmd));
    const d = decodeBody(encodeEnvelope(env));
    expect(d.ok).toBe(true);
    if (d.ok) {
      expect(d.command).toEqual(cmd);
      expect(d.id).toBe(env.id);
      expect(d.bare).toBe(false);
    }
  });

  it("decodes bare commands in the original format", () => {
    const d = decodeBody('{"type":"Cache","block_hashes":[111,222,333],"pin":true}');
    expect(d).toMatchObject({
      ok: true,
      bare: true,
      id: null,
      command: { type: "Cache", block_hashes: [111n, 222n, 333n], pin: true },
    });
    const big = decodeBody('{"type":"Prune","after_block_hash":-6917529027641081856}');
    expect(big.ok && big.command).toEqual({
      type: "Prune",
      after_block_hash: -6917529027641081856n,
    });
  });

  it("accepts decimal strings for hashes", () => {
    const d = decodeBody(
      '{"type":"Think","block_hashes":["-9223372036854775808","9223372036854775807"],"transient":false}',
    );
    expect(d.ok && d.command).toEqual({
      type: "Think",
      block_hashes: [-9223372036854775808n, 9223372036854775807n],
      transient: false,
    });
  });

  it("envelope ids are UUIDv7 carrying the issue time", () => {
    const id = uuidv7(1732230000000);
    expect(isUuidv7(id)).toBe(true);
    expect(uuidv7Time(id)).toBe(1732230000000);
    const ids = new Set(Array.from({ length: 10_000 }, () => uuidv7()));
    expect(ids.size).toBe(10_000);
  });
});

describe("bad input is rejected with the field named", () => {
  const env = (command: unknown, extra: Record<string, unknown> = {}) => ({
    version: 1,
    id: "0193a6c8-5a7e-7c1e-9a61-3b9f8f1f2a10",
    issued_at_ms: 1,
    command,
    ...extra,
  });

  it.each([
    [
      "hash above int64",
      { type: "Cache", block_hashes: [1, "9223372036854775808"], pin: true },
      "command.block_hashes[1]",
    ],
    [
      "hash below int64",
      { type: "Prune", after_block_hash: "-9223372036854775809" },
      "command.after_block_hash",
    ],
    [
      "exponent hash",
      { type: "Cache", block_hashes: [1, 1e300], pin: true },
      "command.block_hashes[1]",
    ],
    [
      "fractional hash",
      { type: "Think", block_hashes: [1.5], transient: true },
      "command.block_hashes[0]",
    ],
    [
      "hash as junk string",
      { type: "Think", block_hashes: ["12x"], transient: true },
      "command.block_hashes[0]",
    ],
    ["empty lease id", { type: "RevokeLease", lease_id: "" }, "command.lease_id"],
    [
      "negative TTL",
      { type: "Cache", block_hashes: [1], pin: true, ttl_seconds: -5 },
      "command.ttl_seconds",
    ],
    [
      "zero TTL",
      { type: "RenewLease", lease_id: "l", new_ttl_seconds: 0 },
      "command.new_ttl_seconds",
    ],
    [
      "absurd TTL",
      { type: "Pause", block_hashes: [1], ttl_seconds: 31 * 86400, lease_id: "l" },
      "command.ttl_seconds",
    ],
    [
      "fractional TTL",
      { type: "Cache", block_hashes: [1], pin: true, ttl_seconds: 1.5 },
      "command.ttl_seconds",
    ],
    ["missing pin", { type: "Cache", block_hashes: [1] }, "command.pin"],
    [
      "missing Pause ttl key",
      { type: "Pause", block_hashes: [1], lease_id: "l" },
      "command.ttl_seconds",
    ],
    ["unknown type", { type: "Flush" }, "command.type"],
    ["missing type", { block_hashes: [1] }, "command.type"],
    [
      "unknown field",
      { type: "Cache", block_hashes: [1], pin: true, ttl_second: 5 },
      "command.ttl_second",
    ],
    ["bad tier", { type: "Warm", block_keys: [], target_tier: "DISK" }, "command.target_tier"],
    [
      "bad storage key",
      { type: "Warm", block_keys: ["abc"], target_tier: "GPU" },
      "command.block_keys[0]",
    ],
    ["negative epoch", { type: "ToolEnd", session_id: "s", epoch: -1 }, "command.epoch"],
    [
      "hashes not a list",
      { type: "ToolStart", session_id: "s", block_hashes: 5 },
      "command.block_hashes",
    ],
  ])("%s", (_name, command, field) => {
    expect(rejectionField(env(command))).toBe(field);
    // The same command given bare names the field without the `command.` prefix.
    expect(rejectionField(command)).toBe(field.replace(/^command\./, ""));
  });

  it("lists over 65 536 entries", () => {
    const hashes = new Array(MAX_LIST_ENTRIES + 1).fill(1);
    expect(rejectionField(env({ type: "Cache", block_hashes: hashes, pin: true }))).toBe(
      "command.block_hashes",
    );
    hashes.pop();
    expect(
      decodeBody(JSON.stringify(env({ type: "Cache", block_hashes: hashes, pin: true }))).ok,
    ).toBe(true);
  });

  it("envelope problems", () => {
    expect(rejectionField(env(EXAMPLE_COMMANDS.RevokeLease, { version: 2 }))).toBe("version");
    expect(
      rejectionField({
        version: 1,
        issued_at_ms: 1,
        command: { type: "RevokeLease", lease_id: "x" },
      }),
    ).toBe("id");
    expect(rejectionField(env({ type: "RevokeLease", lease_id: "x" }, { extra: 1 }))).toBe("extra");
    expect(rejectionField("not json")).toBe("body");
    expect(rejectionField("[1,2]")).toBe("body");
    expect(rejectionField("")).toBe("body");
  });

  it("the publisher-side validator names the field too (bigint input)", () => {
    expect(validationField({ type: "Cache", block_hashes: [1n, 2n ** 63n], pin: true })).toBe(
      "block_hashes[1]",
    );
    expect(
      validationField({ type: "Pause", block_hashes: [], ttl_seconds: null, lease_id: "" }),
    ).toBe("lease_id");
    expect(validationField({ type: "Nope" })).toBe("type");
    expect(() =>
      validateCommand({ type: "Cache", block_hashes: [1n], pin: true, ttl_seconds: 0 }),
    ).toThrow(/ttl_seconds/);
  });

  it("nothing is rounded: 2^53+1 stays exact, an inexact double is refused", () => {
    const d = decodeBody('{"type":"Prune","after_block_hash":9007199254740993}');
    expect(d.ok && d.command.type === "Prune" && d.command.after_block_hash).toBe(
      9007199254740993n,
    );
    // A JS number past 2^53 may already be a rounded image of another value: refused, not guessed.
    expect(validationField({ type: "Prune", after_block_hash: 2 ** 60 })).toBe("after_block_hash");
    expect(validationField({ type: "Cache", block_hashes: [9007199254740992], pin: true })).toBe(
      "block_hashes[0]",
    );
  });
});

describe("Ack schema", () => {
  const good =
    '{"id":"0193a6c8-5a7e-7c1e-9a61-3b9f8f1f2a10","worker_id":"w0","type":"Cache","status":"partial","requested":3,"affected":2,"skipped":0,"missing":[333],"reason":"pin budget exhausted (4096/4096 host tokens)","tiers":{"GPU":0,"CPU_PINNED":2},"lease":null,"epoch":null,"elapsed_us":412}';

  it("accepts the contract's example", () => {
    expect(decodeAck(good)).toMatchObject({
      status: "partial",
      missing: [333n],
      tiers: { GPU: 0, CPU_PINNED: 2 },
    });
  });

  it.each([
    ["status", good.replace('"partial"', '"done"')],
    ["missing[0]", good.replace("[333]", "[9223372036854775808]")],
    ["requested", good.replace('"requested":3', '"requested":-1')],
    ["elapsed_us", good.replace(',"elapsed_us":412', "")],
    ["tiers.GPU", good.replace('"GPU":0', '"GPU":"x"')],
  ])("rejects a bad %s", (field, text) => {
    expect(() => decodeAck(text)).toThrow(field);
  });

  it("has exactly the contract's fields", () => {
    expect(Object.keys(AckSchema.shape)).toEqual([
      "id",
      "worker_id",
      "type",
      "status",
      "requested",
      "affected",
      "skipped",
      "missing",
      "reason",
      "tiers",
      "lease",
      "epoch",
      "elapsed_us",
    ]);
  });
});

describe("subjects", () => {
  it("names worker and broadcast subjects with a configurable prefix", () => {
    expect(workerSubject("w0")).toBe("kv-control-w0");
    expect(broadcastSubject()).toBe("kv-control-broadcast");
    expect(workerSubject("w0", "prod.kv")).toBe("prod.kv-w0");
    expect(parseControlSubject("kv-control-w7")).toEqual({ workerId: "w7" });
    expect(parseControlSubject("kv-control-broadcast")).toEqual({ broadcast: true });
    expect(parseControlSubject("_INBOX.abc")).toBeNull();
  });

  it("refuses worker ids that would change subscription matching", () => {
    for (const bad of ["", "a.b", "*", ">", "a b", "broadcast"])
      expect(() => workerSubject(bad), bad).toThrow();
  });
});

describe("the zod-free fast path agrees with the schemas", () => {
  it("accepts every example with the schema's output, and never accepts what the schema refuses", async () => {
    const { fastCommand } = await import("../src/protocol/fast-validate.js");
    const { CommandSchema } = await import("../src/protocol/index.js");
    const values: unknown[] = [
      null,
      undefined,
      -1,
      0,
      1,
      1.5,
      2 ** 53,
      -0,
      "",
      "x",
      " a",
      "é",
      "12",
      "-5",
      true,
      false,
      [],
      [1],
      [2n ** 63n],
      ["1"],
      {},
      2n ** 63n,
      -(2n ** 63n),
      86400 * 31,
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
      "GPU",
      "CPU_TIER1",
      "x".repeat(129),
    ];
    let accepted = 0;
    let compared = 0;
    for (const type of COMMAND_TYPES) {
      const base = EXAMPLE_COMMANDS[type] as Record<string, unknown>;
      expect(fastCommand(base), type).toEqual(CommandSchema.parse(base));
      const variants: unknown[] = [
        base,
        { ...base, extra: 1 },
        { ...base, type: "Nope" },
        { ...base, type: "toString" },
      ];
      for (const key of Object.keys(base)) {
        if (key === "type") continue;
        const { [key]: _drop, ...without } = base;
        variants.push(without);
        for (const v of values) variants.push({ ...base, [key]: v });
      }
      for (const v of variants) {
        const fast = fastCommand(v);
        const slow = CommandSchema.safeParse(v);
        compared++;
        if (fast !== null) {
          accepted++;
          expect(
            slow.success,
            JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? `${x}n` : x)),
          ).toBe(true);
          expect(fast).toEqual(slow.data);
        }
      }
    }
    expect(compared).toBeGreaterThan(500);
    expect(accepted).toBeGreaterThan(20);
  });
});

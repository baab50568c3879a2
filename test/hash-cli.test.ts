// `kvctl hash` end to end: output shapes, and exit code 2 with the flag named on bad input.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { blockHashes, dynamoSequenceHashes, storageKeys } from "../src/hash/index.js";
import { repoRoot } from "./helpers/python.js";

function kvctl(...args: string[]) {
  const r = spawnSync(
    process.execPath,
    ["--import", "tsx", join(repoRoot, "src/cli/bin.ts"), "hash", ...args],
    { cwd: repoRoot, encoding: "utf8" },
  );
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe("kvctl hash", () => {
  const tokens = Array.from({ length: 70 }, (_, i) => i * 31);

  it("prints JSON arrays equal to the library's results, one per full page", () => {
    const t = JSON.stringify(tokens);
    const sg = kvctl("--scheme", "sglang", "--page-size", "16", "--tokens", t, "--json");
    expect(sg.code).toBe(0);
    expect(JSON.parse(sg.out)).toEqual(Array.from(blockHashes(tokens, { pageSize: 16 }), String));
    expect(JSON.parse(sg.out)).toHaveLength(4);
    const sk = kvctl(
      "--scheme",
      "storage-key",
      "--page-size",
      "16",
      "--tokens",
      t,
      "--json",
      "--salt",
      "s",
    );
    expect(JSON.parse(sk.out)).toEqual(storageKeys(tokens, { pageSize: 16, cacheSalt: "s" }));
    const dy = kvctl(
      "--scheme",
      "dynamo-seq",
      "--page-size",
      "16",
      "--tokens",
      t,
      "--json",
      "--lora",
      "a",
    );
    expect(JSON.parse(dy.out)).toEqual(
      Array.from(dynamoSequenceHashes(tokens, { blockSize: 16, loraName: "a" }), String),
    );
  });

  it("prints a table without --json", () => {
    const r = kvctl(
      "--scheme",
      "dynamo-local",
      "--page-size",
      "4",
      "--tokens",
      "[1,2,3,4,5,6,7,8,9,10,11,12]",
    );
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/page\s+tokens\s+hash/);
    expect(r.out).toContain("14643705804678351452");
  });

  it.each([
    [["--scheme", "nope", "--page-size", "1", "--tokens", "[1]"], /--scheme/],
    [["--scheme", "sglang", "--page-size", "0", "--tokens", "[1]"], /--page-size/],
    [["--scheme", "sglang", "--page-size", "1"], /--tokens \/ --file/],
    [
      ["--scheme", "sglang", "--page-size", "1", "--tokens", "[1,4294967296]"],
      /--tokens: tokens\[1\]/,
    ],
    [["--scheme", "sglang", "--page-size", "1", "--tokens", "[1.5]"], /--tokens: tokens\[0\]/],
    [["--scheme", "sglang", "--page-size", "1", "--file", "/nonexistent.json"], /--file/],
    [["--scheme", "sglang", "--page-size", "1", "--tokens", "[1]", "--prior", "xyz"], /--prior/],
  ])("exit 2 naming the flag: %j", (args, re) => {
    const r = kvctl(...(args as string[]));
    expect(r.code).toBe(2);
    expect(r.err).toMatch(re);
  });
});

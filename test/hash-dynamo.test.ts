// The addon's Dynamo hashes against Dynamo's own function from the ai-dynamo-runtime wheel
// (LocalBlockHash), or the xxhash package driven by Dynamo's spec when the wheel cannot be had;
// the suite name says which oracle ran.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { dynamoBlockHashes, dynamoHashesBatch, dynamoSequenceHashes } from "../src/hash/index.js";
import { hasVenv, repoRoot, venvPython } from "./helpers/python.js";

interface DynamoCase {
  name: string;
  tokens: number[];
  block_size: number;
  lora_name: string | null;
  cache_namespace: string | null;
  eagle: boolean;
  local: string[];
  sequence: string[];
}
interface Oracle {
  oracle: string;
  local_oracle: string;
  sequence_oracle: string;
  dynamo_runtime_version: string | null;
  fallback_reason: string | null;
  cases: DynamoCase[];
}

function runOracle(): Oracle {
  const out = join(mkdtempSync(join(tmpdir(), "kvctl-dynamo-vectors-")), "vectors.json");
  const r = spawnSync(
    venvPython,
    [join(repoRoot, "python/oracles/dynamo_hash_vectors.py"), out, "--fetch"],
    {
      encoding: "utf8",
      timeout: 600_000,
    },
  );
  if (r.status !== 0)
    throw new Error(`dynamo oracle failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
  process.stdout.write(`dynamo oracle: ${r.stdout}`);
  return JSON.parse(readFileSync(out, "utf8")) as Oracle;
}

const oracle = hasVenv ? runOracle() : undefined;
const suiteName = oracle
  ? `Dynamo hashes: local from ${oracle.local_oracle === "ai-dynamo-runtime" ? `Dynamo's own compute_block_hash_for_seq (ai-dynamo-runtime ${oracle.dynamo_runtime_version} wheel)` : `xxhash-spec (${oracle.fallback_reason})`}, sequence from ${oracle.sequence_oracle}`
  : `Dynamo hash vectors: SKIPPED, no venv python at ${venvPython} (run python/setup_venv.sh)`;

describe.skipIf(!oracle)(suiteName, () => {
  const cases = oracle?.cases ?? [];
  const opts = (c: DynamoCase) => ({
    blockSize: c.block_size,
    loraName: c.lora_name,
    cacheNamespace: c.cache_namespace,
    eagle: c.eagle,
  });

  it.each(cases.map((c) => [c.name, c] as const))("%s", (_name, c) => {
    expect(Array.from(dynamoBlockHashes(c.tokens, opts(c)), String)).toEqual(c.local);
    expect(Array.from(dynamoSequenceHashes(c.tokens, opts(c)), String)).toEqual(c.sequence);
  });

  it("batch over many sequences equals per-sequence results", () => {
    const plain = cases.filter(
      (c) => c.block_size === 16 && !c.eagle && !c.lora_name && !c.cache_namespace,
    );
    const r = dynamoHashesBatch(
      plain.map((c) => c.tokens),
      { blockSize: 16 },
    );
    plain.forEach((c, s) => {
      const [a, b] = [r.blockOffsets[s], r.blockOffsets[s + 1]];
      expect(Array.from(r.local.subarray(a, b), String)).toEqual(c.local);
      expect(Array.from(r.sequence.subarray(a, b), String)).toEqual(c.sequence);
    });
  });
});

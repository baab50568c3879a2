// SGLang's own hashing functions from the pinned release, run through
// python/oracles/sglang_hash_vectors.py: the reference that `kvctl verify-hashes` and the test
// suite compare the addon against. One runner and one shape of its output for both.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packageRoot, venvPython } from "../paths.js";

export interface OracleNode {
  tokens: number[];
  storage_keys: string[];
  event_digests: string[];
  block_hashes: string[];
  parent_block_hash: string | null;
}

export interface OracleCase {
  name: string;
  tokens: number[];
  page_size: number;
  bigram: boolean;
  extra_key: string | null;
  cache_salt: string | null;
  lora_registered: boolean;
  event_format: "sglang" | "dynamo";
  nodes: OracleNode[];
}

export interface SglangOracleVectors {
  sglang_version: string;
  /** The SGLang source files the oracle loaded. */
  files: string[];
  cases: OracleCase[];
  mooncake: { storage_keys: string[]; layout: Record<string, unknown>; object_keys: string[] }[];
}

export const SGLANG_ORACLE_SCRIPT = join(packageRoot, "python/oracles/sglang_hash_vectors.py");

/** Runs the oracle; throws with its output when it fails. `inherit` shows its output live. */
export function runSglangOracle(
  opts: { python?: string; seed?: string; inherit?: boolean } = {},
): SglangOracleVectors {
  const python = opts.python ?? venvPython;
  const dir = mkdtempSync(join(tmpdir(), "kvctl-sglang-vectors-"));
  const out = join(dir, "vectors.json");
  try {
    const args = [
      SGLANG_ORACLE_SCRIPT,
      out,
      ...(opts.seed === undefined ? [] : ["--seed", opts.seed]),
    ];
    const r = spawnSync(python, args, {
      encoding: "utf8",
      timeout: 300_000,
      stdio: opts.inherit ? ["ignore", "inherit", "inherit"] : "pipe",
    });
    if (r.status !== 0 || !existsSync(out)) {
      const how = r.error ? r.error.message : `exit ${r.status}`;
      throw new Error(
        `the SGLang oracle failed (${how}): ${python} ${args.join(" ")}\n${r.stdout ?? ""}${r.stderr ?? ""}`,
      );
    }
    return JSON.parse(readFileSync(out, "utf8")) as SglangOracleVectors;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

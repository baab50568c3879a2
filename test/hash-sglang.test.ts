// The addon against SGLang's own hashing code from the pinned release (python/oracles): the
// oracle runs at test time in the project venv and the addon must match it byte for byte.
import { describe, expect, it } from "vitest";
import {
  blockHashes,
  blockHashesBatch,
  mooncakeObjectKeys,
  mooncakeObjectKeysForStorageKeys,
  sglangPageHashes,
  setSha256Backend,
  sglangPageHashesBatch,
  sha256Backend,
  storageKeyToInt64,
  storageKeys,
  storageKeysBatch,
} from "../src/hash/index.js";
import { type OracleCase, type OracleNode, runSglangOracle } from "../src/hash/sglang-oracle.js";
import { hasVenv, venvPython } from "./helpers/python.js";

const oracle = hasVenv ? runSglangOracle() : undefined;
const suiteName = oracle
  ? `SGLang ${oracle.sglang_version} own hash functions (oracle: ${oracle.files.join(", ")})`
  : `SGLang hash vectors: SKIPPED, no venv python at ${venvPython} (run python/setup_venv.sh)`;

describe.skipIf(!oracle)(suiteName, () => {
  const cases = oracle?.cases ?? [];

  it("has a corpus with edges, bigrams and namespaces", () => {
    expect(cases.length).toBeGreaterThan(50);
    expect(cases.some((c) => c.bigram)).toBe(true);
    expect(cases.some((c) => c.cache_salt)).toBe(true);
    expect(cases.some((c) => c.tokens.includes(2 ** 32 - 1) && c.tokens.includes(0))).toBe(true);
  });

  it.each(cases.map((c) => [c.name, c] as const))("%s", (_name, c) => {
    const base = {
      pageSize: c.page_size,
      bigram: c.bigram,
      extraKey: c.extra_key,
      cacheSalt: c.cache_salt,
    };
    const eventOpts = { ...base, eventFormat: c.event_format, extraKeyIsLora: c.lora_registered };
    c.nodes.forEach((node, i) => {
      // A lone node gets the request's raw tokens, partial tail included: only full pages count.
      const tokens = c.nodes.length === 1 ? c.tokens : node.tokens;
      const parent = i > 0 ? c.nodes[i - 1] : undefined;
      const storagePrior = parent?.storage_keys.at(-1);
      const eventPrior = parent?.event_digests.at(-1);
      expect(storageKeys(tokens, { ...base, prior: storagePrior })).toEqual(node.storage_keys);
      expect(sglangPageHashes(tokens, { ...base, prior: storagePrior }).toString("hex")).toBe(
        node.storage_keys.join(""),
      );
      const hashes = blockHashes(tokens, { ...eventOpts, prior: eventPrior });
      expect(Array.from(hashes, String)).toEqual(node.block_hashes);
      if (parent) expect(node.parent_block_hash).toBe(parent.block_hashes.at(-1));
      expect(Array.from(storageKeyToInt64(node.storage_keys), String)).toEqual(
        (node as OracleNode & { plain_int64: string[] }).plain_int64,
      );
    });
    if (c.nodes.length === 0) expect(storageKeys(c.tokens, base)).toEqual([]);
  });

  it("Mooncake object keys equal MooncakeStore's own key methods", () => {
    expect(oracle?.mooncake.length).toBeGreaterThan(5);
    for (const m of oracle?.mooncake ?? []) {
      const l = m.layout as {
        prefix?: string;
        mla?: boolean;
        tp_rank?: number;
        pp_rank?: number;
        pp_size?: number;
        split_factor?: number;
      };
      const layout = {
        prefix: l.prefix,
        mla: l.mla,
        tpRank: l.tp_rank,
        ppRank: l.pp_rank,
        ppSize: l.pp_size,
        splitFactor: l.split_factor,
      };
      expect(mooncakeObjectKeysForStorageKeys(m.storage_keys, layout)).toEqual(m.object_keys);
      expect(
        mooncakeObjectKeys(
          Array.from({ length: 128 }, (_, i) => i),
          { pageSize: 64, layout },
        ),
      ).toEqual(m.object_keys);
    }
  });

  it("the portable SHA-256 path gives the same batch results as the active one", () => {
    const seqs = cases.map((c) => c.tokens);
    const active = sha256Backend();
    const a = sglangPageHashesBatch(seqs, { pageSize: 16 });
    expect(setSha256Backend("portable")).toBe(true);
    try {
      expect(sglangPageHashesBatch(seqs, { pageSize: 16 }).digests.equals(a.digests)).toBe(true);
    } finally {
      setSha256Backend(active);
    }
  });

  it("batch calls equal the per-sequence results", () => {
    const groups = new Map<string, OracleCase[]>();
    for (const c of cases) {
      if (c.nodes.length > 1) continue;
      const k = JSON.stringify([
        c.page_size,
        c.bigram,
        c.extra_key,
        c.cache_salt,
        c.event_format,
        c.lora_registered,
      ]);
      groups.set(k, [...(groups.get(k) ?? []), c]);
    }
    for (const group of groups.values()) {
      const c0 = group[0];
      const opts = {
        pageSize: c0.page_size,
        bigram: c0.bigram,
        extraKey: c0.extra_key,
        cacheSalt: c0.cache_salt,
      };
      const seqs = group.map((c) => c.tokens);
      const keys = storageKeysBatch(seqs, opts);
      const events = blockHashesBatch(seqs, {
        ...opts,
        eventFormat: c0.event_format,
        extraKeyIsLora: c0.lora_registered,
      });
      const digests = sglangPageHashesBatch(seqs, opts);
      group.forEach((c, s) => {
        const want = c.nodes[0]?.storage_keys ?? [];
        const [a, b] = [keys.pageOffsets[s], keys.pageOffsets[s + 1]];
        expect(keys.keys.slice(a, b)).toEqual(want);
        expect(digests.digests.subarray(a * 32, b * 32).toString("hex")).toBe(want.join(""));
        expect(Array.from(events.hashes.subarray(a, b), String)).toEqual(
          c.nodes[0]?.block_hashes ?? [],
        );
      });
    }
  });
});

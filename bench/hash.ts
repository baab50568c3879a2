// `npm run bench:hash [-- --json]`: SGLang page-chain throughput in tokens/s on ONE core for
//   addon        sglangPageHashesBatch: 4096 sequences x 64 pages x 64 tokens in one call
//   node:crypto  one createHash per page, chained (the obvious pure-JS implementation)
//   python       SGLang's own get_hash_str from the pinned release (venv), called per node with
//                page_size exactly as the engine's compute_node_hash_values does
//   openssl      `openssl speed -evp sha256 -bytes 288` (a 64-token page with its 32-byte prior
//                is 288 bytes), converted to tokens/s: the machine's single-core SHA-256 limit
// With --json the last line printed is one JSON object with the numbers and ratios. --smoke: the
// same measurements on a sixty-fourth of the sequences, for the test that the bench still runs.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { packageRoot, venvPython } from "../src/paths.js";
import { sglangPageHashesBatch, sha256Backend } from "../src/hash/index.js";

const json = process.argv.includes("--json");
const smoke = process.argv.includes("--smoke");
const PAGE = 64;
const PAGES = 64;
const SEQS = smoke ? 64 : 4096;
const SIDE_SEQS = smoke ? 4 : 256; // node:crypto and python, which are far slower
const TOKENS_PER_SEQ = PAGE * PAGES;

function randomBatch(seqs: number) {
  const tokens = new Uint32Array(seqs * TOKENS_PER_SEQ);
  let x = 0x9e3779b9;
  for (let i = 0; i < tokens.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    tokens[i] = (x >>> 0) % 152_064; // a realistic vocabulary
  }
  const offsets = new Uint32Array(seqs + 1);
  for (let s = 0; s <= seqs; s++) offsets[s] = s * TOKENS_PER_SEQ;
  return { tokens, offsets };
}

function best(reps: number, f: () => void): number {
  let t = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    f();
    t = Math.min(t, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return t;
}

function benchAddon(): number {
  const batch = randomBatch(SEQS);
  sglangPageHashesBatch(batch, { pageSize: PAGE }); // warm-up
  const s = best(5, () => sglangPageHashesBatch(batch, { pageSize: PAGE }));
  return batch.tokens.length / s;
}

function benchNodeCrypto(): number {
  const seqs = SIDE_SEQS;
  const { tokens } = randomBatch(seqs);
  const bytes = Buffer.from(tokens.buffer, tokens.byteOffset, tokens.byteLength);
  const run = () => {
    for (let s = 0; s < seqs; s++) {
      let prior: Buffer | undefined;
      for (let p = 0; p < PAGES; p++) {
        const start = (s * TOKENS_PER_SEQ + p * PAGE) * 4;
        const h = createHash("sha256");
        if (prior) h.update(prior);
        h.update(bytes.subarray(start, start + PAGE * 4));
        prior = h.digest();
      }
    }
  };
  run();
  return (seqs * TOKENS_PER_SEQ) / best(3, run);
}

const PY = `
import random, sys, time, json
sys.path.insert(0, sys.argv[1])
import sglang_release
sg = sglang_release.load()
P, PAGES, SEQS = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(1)
seqs = [[rng.randrange(0, 152064) for _ in range(P * PAGES)] for _ in range(SEQS)]
sg.get_hash_str(seqs[0], None, page_size=P)  # JIT build / warm-up outside the timing
best = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    for s in seqs:
        sg.get_hash_str(s, None, page_size=P)
    best = min(best, time.perf_counter() - t0)
per_page = float("inf")
for _ in range(2):
    t0 = time.perf_counter()
    for s in seqs[:32]:
        prior = None
        for p in range(PAGES):
            prior = sg.get_hash_str(s[p * P:(p + 1) * P], prior)
    per_page = min(per_page, time.perf_counter() - t0)
print(json.dumps({"tokens_per_s": SEQS * P * PAGES / best, "per_page_tokens_per_s": min(32, SEQS) * P * PAGES / per_page}))
`;

function benchPython(): { tokensPerS: number; perPage: number } | { error: string } {
  const py = venvPython;
  if (!existsSync(py)) return { error: `no venv python at ${py}` };
  const r = spawnSync(
    py,
    [
      "-c",
      PY,
      join(packageRoot, "python", "oracles"),
      String(PAGE),
      String(PAGES),
      String(SIDE_SEQS),
    ],
    { encoding: "utf8", timeout: 600_000 },
  );
  if (r.status !== 0)
    return { error: `python failed: ${(r.stderr || r.stdout).trim().split("\n").at(-1)}` };
  const j = JSON.parse(r.stdout.trim().split("\n").at(-1) as string);
  return { tokensPerS: j.tokens_per_s, perPage: j.per_page_tokens_per_s };
}

function benchOpenssl(): { tokensPerS: number; bytes: number } | { error: string } {
  const r = spawnSync(
    "openssl",
    ["speed", "-evp", "sha256", "-bytes", "288", "-seconds", smoke ? "1" : "3"],
    { encoding: "utf8", timeout: 120_000 },
  );
  if (r.status !== 0 || r.error)
    return { error: `openssl speed failed: ${r.error?.message ?? r.stderr}` };
  const out = `${r.stdout}\n${r.stderr}`;
  // "type 288 bytes" header, then "sha256   1349291.61k" (1000s of bytes per second).
  const sizes =
    /^type\s+(.*)$/m
      .exec(out)?.[1]
      .trim()
      .split(/\s{2,}|\s+(?=\d+ bytes)/) ?? [];
  const row = /^sha256\s+(.*)$/m.exec(out)?.[1].trim().split(/\s+/) ?? [];
  if (!sizes.length || sizes.length !== row.length)
    return { error: `cannot parse openssl output:\n${out}` };
  const i = Math.max(
    0,
    sizes.findIndex((s) => s.startsWith("288")),
  );
  const bytes = Number.parseInt(sizes[i], 10);
  const bytesPerS = Number.parseFloat(row[i]) * 1000;
  return { tokensPerS: (bytesPerS / (32 + PAGE * 4)) * PAGE, bytes };
}

const fmt = (x: number) => (x >= 1e6 ? `${(x / 1e6).toFixed(1)} M` : `${(x / 1e3).toFixed(1)} k`);

const addon = benchAddon();
const nodeCrypto = benchNodeCrypto();
const python = benchPython();
const openssl = benchOpenssl();
const py = "tokensPerS" in python ? python.tokensPerS : Number.NaN;
const ossl = "tokensPerS" in openssl ? openssl.tokensPerS : Number.NaN;

const rows: [string, number, string][] = [
  [
    `addon (${sha256Backend()}, 2-way interleaved)`,
    addon,
    `${SEQS} seqs x ${PAGES} pages x ${PAGE} tokens, one call`,
  ],
  ["node:crypto, one call per page", nodeCrypto, `${SIDE_SEQS} seqs, chained createHash`],
  [
    "python: sglang get_hash_str per node",
    py,
    "error" in python ? python.error : `pinned release, page_size=64, ${SIDE_SEQS} seqs`,
  ],
  [
    "python: sglang get_hash_str per page",
    "perPage" in python ? python.perPage : Number.NaN,
    `chained by hand, ${Math.min(32, SIDE_SEQS)} seqs`,
  ],
  [
    "openssl speed -evp sha256",
    ossl,
    "error" in openssl ? openssl.error : `${openssl.bytes}-byte blocks = 1 page + prior`,
  ],
];
console.log(
  `SGLang page-chain hashing, tokens/s on one core (page = ${PAGE} tokens = 288 bytes with its prior)`,
);
for (const [name, v, note] of rows) {
  const ratio = Number.isFinite(v) ? `${(addon / v).toFixed(2)}x` : "-";
  console.log(
    `${name.padEnd(42)} ${(Number.isFinite(v) ? fmt(v) : "n/a").padStart(10)} tok/s   addon = ${ratio.padStart(8)}   ${note}`,
  );
}
const bars = [
  ["vs python >= 25x", addon / py >= 25],
  ["vs node:crypto >= 5x", addon / nodeCrypto >= 5],
  ["vs openssl >= 0.8x", addon / ossl >= 0.8],
] as const;
console.log(`bars: ${bars.map(([n, ok]) => `${n}: ${ok ? "met" : "MISSED"}`).join("; ")}`);
if (json) {
  const r = (x: number) => (Number.isFinite(x) ? Math.round(x) : null);
  const q = (x: number) => (Number.isFinite(x) ? Number(x.toFixed(3)) : null);
  console.log(
    JSON.stringify({
      bench: "hash",
      addon_tokens_per_s: r(addon),
      python_tokens_per_s: r(py),
      node_crypto_tokens_per_s: r(nodeCrypto),
      openssl_tokens_per_s: r(ossl),
      ratio_vs_python: q(addon / py),
      ratio_vs_node_crypto: q(addon / nodeCrypto),
      ratio_vs_openssl: q(addon / ossl),
    }),
  );
}

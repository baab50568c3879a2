// GPU vs CPU SGLang page chains (`npm run test:gpu`; excluded from the default vitest run).
// Uses the CUDA build (build-cuda/Release/kvctl.node, `npm run build:cuda`) when present.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot } from "../../src/addon.js";

const cudaBuild = join(packageRoot, "build-cuda", "Release", "kvctl.node");
if (!process.env.KVCTL_ADDON && existsSync(cudaBuild)) process.env.KVCTL_ADDON = cudaBuild;
const hash = await import("../../src/hash/index.js");

const info = hash.cudaInfo();
const why = !info.built
  ? "the addon was built without CUDA (npm run build:cuda)"
  : !info.available
    ? (info.error ?? "no CUDA device")
    : "";
if (why) console.log(`GPU hash tests skipped: ${why}`);

function batch(seqs: number, maxLen: number, seed: number) {
  let x = seed >>> 0 || 1;
  const next = () => ((x ^= x << 13), (x ^= x >>> 17), (x ^= x << 5), x >>> 0);
  return Array.from({ length: seqs }, () =>
    Uint32Array.from({ length: next() % maxLen }, () => next()),
  );
}

describe.skipIf(Boolean(why))(
  `CUDA SGLang chain == CPU chain${why ? ` (skipped: ${why})` : ""}`,
  () => {
    it.each([1, 16, 64])("page size %i, plain, bigram and seeded", (pageSize) => {
      const seqs = batch(300, pageSize * 9 + 3, pageSize);
      for (const opts of [
        { pageSize },
        { pageSize, bigram: true },
        { pageSize, cacheSalt: "tenant-a", extraKey: "k" },
      ]) {
        const cpu = hash.sglangPageHashesBatch(seqs, opts);
        const gpu = hash.sglangPageHashesGpu(seqs, opts);
        expect(Array.from(gpu.pageOffsets)).toEqual(Array.from(cpu.pageOffsets));
        expect(gpu.digests.equals(cpu.digests)).toBe(true);
      }
    });

    it("a large batch (4096 x 64 pages)", () => {
      const tokens = new Uint32Array(4096 * 64 * 64).map((_, i) => (i * 2654435761) >>> 0);
      const offsets = Uint32Array.from({ length: 4097 }, (_, s) => s * 64 * 64);
      const cpu = hash.sglangPageHashesBatch({ tokens, offsets }, { pageSize: 64 });
      const gpu = hash.sglangPageHashesGpu({ tokens, offsets }, { pageSize: 64 });
      expect(gpu.digests.equals(cpu.digests)).toBe(true);
    });
  },
);

describe.skipIf(!why)("GPU path without a usable CUDA device", () => {
  it("returns a clean JS error", () => {
    expect(() => hash.sglangPageHashesGpu([[1, 2, 3, 4]], { pageSize: 2 })).toThrow(
      /^CUDA unavailable: /,
    );
  });
});

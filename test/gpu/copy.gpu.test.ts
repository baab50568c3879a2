// GPU block copies against their CPU twin (`npm run test:gpu`; excluded from the default run).
// (1) every kernel (fill, scatter copy with 16/4/1-byte lanes, coalesced 2D runs, layout
//     conversion) against the CPU twin on random pools, all layouts, odd page counts and sizes;
// (2) GPU page digests == CPU page digests;
// (3) device -> pinned -> device round trips verified by digest; bad input on CUDA pools.
// Uses the CUDA build (build-cuda/Release/kvctl.node, `npm run build:cuda`) when present.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { packageRoot } from "../../src/addon.js";
import { rng, shuffled } from "../helpers/random.js";

const cudaBuild = join(packageRoot, "build-cuda", "Release", "kvctl.node");
if (!process.env.KVCTL_ADDON && existsSync(cudaBuild)) process.env.KVCTL_ADDON = cudaBuild;
const copy = await import("../../src/copy/index.js");
type LayoutKind = import("../../src/copy/index.js").LayoutKind;
type Pool = import("../../src/copy/index.js").Pool;

const status = copy.cudaStatus();
const why = status.available ? "" : (status.reason ?? "no CUDA device");
if (why) console.log(`GPU copy tests skipped: ${why}`);

const KINDS: LayoutKind[] = ["layer_first", "page_first", "page_first_direct"];

async function bytesOf(p: Pool): Promise<Buffer> {
  return p.read(0, p.bytes);
}

describe.skipIf(Boolean(why))(
  `CUDA block copies == CPU twin${why ? ` (skipped: ${why})` : ""}`,
  () => {
    it("the fill kernel writes the CPU twin's bytes", async () => {
      for (const size of [1, 7, 8, 4099]) {
        const L = {
          layout: "page_first" as const,
          pageSize: 1,
          layers: 1,
          heads: 1,
          headDim: size,
          dtypeSize: 1,
          kv: 1 as const,
        };
        const c = copy.createPool({ kind: "cpu", layout: L, pages: 3 });
        const d = copy.createPool({ kind: "cuda-device", layout: L, pages: 3 });
        await c.fill(size);
        await d.fill(size);
        expect((await bytesOf(d)).equals(await bytesOf(c))).toBe(true);
        c.free();
        d.free();
      }
    });

    for (const a of KINDS) {
      for (const b of KINDS) {
        it(`copy kernel and 2D runs == CPU twin: ${a} -> ${b}, random odd pools, 1/2/4/16-byte items`, async () => {
          const next = rng(31 * KINDS.indexOf(a) + KINDS.indexOf(b) + 1);
          for (let trial = 0; trial < 4; trial++) {
            // headDim*dtypeSize odd, %4 and %16 in turn: every lane width of the kernel.
            const dtypeSize = [1, 2, 4, 2][trial];
            const headDim = [3, 5, 7, 8][trial] * (trial === 3 ? 2 : 1);
            const dims = {
              pageSize: 1 + (next() % 7),
              layers: 1 + (next() % 5),
              kv: (1 + (next() % 2)) as 1 | 2,
              heads: 1 + (next() % 3),
              headDim,
              dtypeSize,
            };
            const sp = 5 + (next() % 29),
              dp = 5 + (next() % 29);
            const cs = copy.createPool({ kind: "cpu", layout: { layout: a, ...dims }, pages: sp });
            const cd = copy.createPool({ kind: "cpu", layout: { layout: b, ...dims }, pages: dp });
            const gs = copy.createPool({
              kind: "cuda-device",
              layout: { layout: a, ...dims },
              pages: sp,
            });
            const gd = copy.createPool({
              kind: trial % 2 ? "cuda-pinned" : "cuda-device",
              layout: { layout: b, ...dims },
              pages: dp,
            });
            const s1 = next(),
              s2 = next();
            await Promise.all([cs.fill(s1), gs.fill(s1), cd.fill(s2), gd.fill(s2)]);
            const n = 1 + (next() % Math.min(sp, dp));
            const dst = shuffled(dp, next).slice(0, n);
            const src = Array.from({ length: n }, () => next() % sp);
            if (n >= 4) {
              // a run of consecutive pages on both sides
              const base = next() % (sp - 3),
                dbase = next() % (dp - 3);
              const used = new Set([dbase, dbase + 1, dbase + 2]);
              const rest = shuffled(dp, next).filter((x) => !used.has(x));
              src.splice(0, 3, base, base + 1, base + 2);
              dst.splice(0, n, dbase, dbase + 1, dbase + 2, ...rest.slice(0, n - 3));
            }
            for (const coalesceMinPages of [0, 2]) {
              const c = await copy.copyPages(cs, cd, src, dst, { coalesceMinPages });
              const g = await copy.copyPages(gs, gd, src, dst, { coalesceMinPages });
              expect(g).toMatchObject({
                pages: c.pages,
                runs: c.runs,
                kernelPages: c.kernelPages,
                granularity: c.granularity,
              });
              expect((await bytesOf(gd)).equals(await bytesOf(cd))).toBe(true);
            }
            for (const p of [cs, cd, gs, gd]) p.free();
          }
        });
      }
    }

    it("GPU SHA-256 page digests == CPU digests, every layout, device and pinned pools", async () => {
      for (const k of KINDS) {
        const layout = { layout: k, pageSize: 3, layers: 3, heads: 2, headDim: 5, dtypeSize: 2 };
        const c = copy.createPool({ kind: "cpu", layout, pages: 37 });
        const d = copy.createPool({ kind: "cuda-device", layout, pages: 37 });
        const h = copy.createPool({ kind: "cuda-pinned", layout, pages: 37 });
        await Promise.all([c.fill(5), d.fill(5), h.fill(5)]);
        const want = await copy.digests(c);
        expect(await copy.digests(d, undefined, { engine: "gpu" })).toEqual(want);
        expect(await copy.digests(d, undefined, { engine: "cpu" })).toEqual(want);
        expect(await copy.digests(h, undefined, { engine: "gpu" })).toEqual(want);
        expect(await copy.digests(h, undefined, { engine: "cpu" })).toEqual(want);
        for (const p of [c, d, h]) p.free();
      }
    });

    it("round trips device -> pinned host -> device at model scale, verified by digest", async () => {
      const dims = { pageSize: 64, layers: 32, heads: 8, headDim: 128, dtypeSize: 2 }; // llama-3.1-8b, 8 MiB pages
      for (const [dk, hk] of [
        ["layer_first", "layer_first"],
        ["layer_first", "page_first"],
        ["page_first_direct", "page_first_direct"],
      ] as const) {
        const dev = copy.createPool({
          kind: "cuda-device",
          layout: { layout: dk, ...dims },
          pages: 96,
        });
        const host = copy.createPool({
          kind: "cuda-pinned",
          layout: { layout: hk, ...dims },
          pages: 48,
        });
        await dev.fill(17);
        const pages = shuffled(96, rng(3)).slice(0, 45);
        pages.splice(0, 8, 10, 11, 12, 13, 14, 15, 16, 17);
        const slots = Array.from({ length: 45 }, (_, i) => i);
        const want = await copy.digests(dev, pages);
        await copy.gather(dev, host, pages, slots);
        expect(await copy.digests(host, slots)).toEqual(want);
        await dev.fill(18); // overwrite, then restore elsewhere
        const back = shuffled(96, rng(4)).slice(0, 45);
        await copy.scatter(host, dev, slots, back);
        expect(await copy.digests(dev, back)).toEqual(want);
        dev.free();
        host.free();
      }
    });

    it("bad input on CUDA pools: rejected, never a crash; freeing mid-copy is safe", async () => {
      const layout = {
        layout: "layer_first" as const,
        pageSize: 16,
        layers: 4,
        heads: 2,
        headDim: 64,
        dtypeSize: 2,
      };
      const d = copy.createPool({ kind: "cuda-device", layout, pages: 64 });
      const h = copy.createPool({ kind: "cuda-pinned", layout, pages: 64 });
      const c = copy.createPool({ kind: "cpu", layout, pages: 64 });
      await d.fill(1);
      await expect(copy.copyPages(d, h, [0, 1], [3, 3])).rejects.toHaveProperty(
        "code",
        "E_DUPLICATE",
      );
      await expect(copy.copyPages(d, h, [64], [0])).rejects.toHaveProperty("code", "E_RANGE");
      await expect(copy.copyPages(d, c, [0], [0])).rejects.toHaveProperty("code", "E_DEVICE");
      expect(() => copy.createPool({ kind: "cuda-device", layout, pages: 1, device: 999 })).toThrow(
        /does not exist|cuda/i,
      );
      const want = await copy.digests(d);
      const all = Array.from({ length: 64 }, (_, i) => i);
      const p = copy.copyPages(d, h, all, all);
      d.free();
      await p;
      expect(await copy.digests(h)).toEqual(want);
      await expect(copy.digests(d, [0])).rejects.toHaveProperty("code", "E_FREED");
      h.free();
      c.free();
    });
  },
);

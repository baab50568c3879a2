// The CPU twin of the GPU block copies (src/copy): same API, same layout/index arithmetic as the
// kernels, run on every host. Round trips verified by digest and byte for byte.
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import {
  type LayoutKind,
  type PoolLayout,
  buildInfo,
  copyPages,
  createPool,
  digests,
  gather,
  layoutInfo,
  scatter,
} from "../src/copy/index.js";
import { rng, shuffled } from "./helpers/random.js";

const KINDS: LayoutKind[] = ["layer_first", "page_first", "page_first_direct"];

// Canonical page bytes (kv, layer, token) read straight from a pool's memory, from SGLang's dims.
async function canonicalPage(pool: ReturnType<typeof createPool>, page: number): Promise<Buffer> {
  const L = pool.layout;
  const kv = L.kv ?? 2,
    tb = L.heads * L.headDim * L.dtypeSize,
    P = pool.pages,
    ps = L.pageSize;
  const all = await pool.read(0, pool.bytes);
  const parts: Buffer[] = [];
  for (let c = 0; c < kv; c++)
    for (let l = 0; l < L.layers; l++)
      for (let t = 0; t < ps; t++) {
        const tok = page * ps + t;
        const off =
          L.layout === "layer_first"
            ? ((c * L.layers + l) * P * ps + tok) * tb
            : L.layout === "page_first"
              ? ((c * P * ps + tok) * L.layers + l) * tb
              : (((c * P + page) * L.layers + l) * ps + t) * tb;
        parts.push(all.subarray(off, off + tb));
      }
  return Buffer.concat(parts);
}

describe("copy: CPU twin", () => {
  it("reports what the addon was built with", () => {
    const b = buildInfo();
    expect(b.layouts).toEqual(["layer_first", "page_first", "page_first_direct"]);
    expect(typeof b.sha256.shaNi).toBe("boolean");
    expect(typeof b.cuda.built).toBe("boolean");
  });

  it("layout sizes follow SGLang's dims", () => {
    const L: PoolLayout = {
      layout: "layer_first",
      pageSize: 64,
      layers: 32,
      heads: 8,
      headDim: 128,
      dtypeSize: 2,
    };
    expect(layoutInfo(L)).toEqual({
      pageBytes: 2 * 32 * 64 * 8 * 128 * 2,
      tokenBytes: 2048,
      segments: 64,
      segmentBytes: 64 * 2048,
    });
    expect(layoutInfo({ ...L, layout: "page_first" }).segments).toBe(2);
    expect(layoutInfo({ ...L, layout: "page_first_direct", kv: 1 }).segments).toBe(1);
  });

  for (const a of KINDS) {
    for (const b of KINDS) {
      it(`round trip ${a} -> ${b} -> ${a}, odd sizes, verified by digest`, async () => {
        const next = rng(KINDS.indexOf(a) * 3 + KINDS.indexOf(b) + 11);
        const dims = {
          pageSize: 1 + (next() % 5),
          layers: 1 + (next() % 3),
          heads: 1 + (next() % 3),
          headDim: 1 + (next() % 7),
          dtypeSize: [1, 2, 4][next() % 3],
        };
        const devPages = 13,
          hostPages = 9;
        const dev = createPool({ kind: "cpu", layout: { layout: a, ...dims }, pages: devPages });
        const host = createPool({ kind: "cpu", layout: { layout: b, ...dims }, pages: hostPages });
        const back = createPool({ kind: "cpu", layout: { layout: a, ...dims }, pages: devPages });
        await dev.fill(next());
        const src = shuffled(devPages, next).slice(0, 7);
        src.splice(0, 3, 4, 5, 6); // a consecutive run among scattered pages
        const uniq = [...new Set(src)];
        const slots = shuffled(hostPages, next).slice(0, uniq.length);
        const st = await gather(dev, host, uniq, slots);
        expect(st.pages).toBe(uniq.length);
        expect(st.bytes).toBe(uniq.length * dev.pageBytes);
        expect(st.granularity).toBe(
          a === b ? "native" : (a === "page_first") !== (b === "page_first") ? "token" : "row",
        );
        const out = Array.from({ length: uniq.length }, (_, i) => i + 2);
        await scatter(host, back, slots, out);
        const want = await digests(dev, uniq);
        expect(await digests(host, slots)).toEqual(want);
        expect(await digests(back, out)).toEqual(want);
        // Byte for byte, page by page, through SGLang's dims.
        for (let i = 0; i < uniq.length; i++) {
          const x = await canonicalPage(dev, uniq[i]);
          expect((await canonicalPage(host, slots[i])).equals(x)).toBe(true);
          expect(createHash("sha256").update(x).digest("hex")).toBe(want[i]);
        }
        for (const p of [dev, host, back]) p.free();
      });
    }
  }

  it("coalesces runs of consecutive pages and sends scattered pages to the kernel path", async () => {
    const layout: PoolLayout = {
      layout: "layer_first",
      pageSize: 4,
      layers: 3,
      heads: 2,
      headDim: 8,
      dtypeSize: 2,
    };
    const a = createPool({ kind: "cpu", layout, pages: 64 });
    const b = createPool({ kind: "cpu", layout, pages: 64 });
    await a.fill(3);
    const contiguous = await copyPages(
      a,
      b,
      Array.from({ length: 32 }, (_, i) => i + 5),
      Array.from({ length: 32 }, (_, i) => i + 20),
    );
    expect(contiguous).toMatchObject({ runs: 1, coalescedPages: 32, kernelPages: 0 });
    const scattered = await copyPages(a, b, [1, 9, 3, 40, 41, 42], [0, 2, 4, 6, 7, 8]);
    expect(scattered).toMatchObject({ runs: 1, coalescedPages: 3, kernelPages: 3 });
    const noCoalesce = await copyPages(a, b, [40, 41, 42], [6, 7, 8], { coalesceMinPages: 0 });
    expect(noCoalesce).toMatchObject({ runs: 0, kernelPages: 3 });
    expect(await digests(b, [0, 2, 4, 6, 7, 8])).toEqual(await digests(a, [1, 9, 3, 40, 41, 42]));
    a.free();
    b.free();
  });

  it("a page's digest is the same in every layout, and pages differ", async () => {
    const dims = { pageSize: 3, layers: 2, heads: 2, headDim: 4, dtypeSize: 2 };
    const pools = KINDS.map((k) =>
      createPool({ kind: "cpu", layout: { layout: k, ...dims }, pages: 5 }),
    );
    await pools[0].fill(77);
    for (const p of pools.slice(1)) await copyPages(pools[0], p, [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]);
    const ds = await Promise.all(pools.map((p) => digests(p)));
    expect(ds[1]).toEqual(ds[0]);
    expect(ds[2]).toEqual(ds[0]);
    expect(new Set(ds[0]).size).toBe(5);
    for (const p of pools) p.free();
  });

  it("copies complete asynchronously: the call returns a pending Promise at once", async () => {
    const layout: PoolLayout = {
      layout: "page_first",
      pageSize: 64,
      layers: 8,
      heads: 8,
      headDim: 128,
      dtypeSize: 2,
    };
    const a = createPool({ kind: "cpu", layout, pages: 24 });
    const b = createPool({ kind: "cpu", layout, pages: 24 });
    await a.fill(1);
    let done = false;
    const p = copyPages(
      a,
      b,
      shuffled(24, rng(5)),
      Array.from({ length: 24 }, (_, i) => i),
    ).then((s) => ((done = true), s));
    expect(done).toBe(false);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    const st = await p;
    clearInterval(timer);
    expect(st.pages).toBe(24);
    expect(done).toBe(true);
    a.free();
    b.free();
  });

  it("read/write reach the pool's bytes and MLA (kv=1) pools work", async () => {
    const layout: PoolLayout = {
      layout: "page_first_direct",
      kv: 1,
      pageSize: 2,
      layers: 2,
      heads: 1,
      headDim: 3,
      dtypeSize: 1,
    };
    const a = createPool({ kind: "cpu", layout, pages: 3 });
    expect(a.bytes).toBe(3 * 12);
    await a.write(12, Buffer.from("abcdefghijkl"));
    expect((await a.read(12, 12)).toString()).toBe("abcdefghijkl");
    expect(await digests(a, [1])).toEqual([
      createHash("sha256").update("abcdefghijkl").digest("hex"),
    ]);
    a.free();
  });
});

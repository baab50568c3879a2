// Bad input to the copy API, on the CPU twin: rejected with a CopyError naming the problem, or
// safely ordered (a pool freed mid-copy) — never a crash, never silent corruption.
import { describe, expect, it } from "vitest";
import {
  CopyError,
  type PoolLayout,
  copyPages,
  createPool,
  cudaStatus,
  digests,
  scatter,
} from "../src/copy/index.js";

const layout: PoolLayout = {
  layout: "layer_first",
  pageSize: 4,
  layers: 2,
  heads: 2,
  headDim: 8,
  dtypeSize: 2,
};

async function rejection(p: Promise<unknown>): Promise<CopyError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(CopyError);
    return e as CopyError;
  }
  throw new Error("expected a rejection");
}

function thrown(fn: () => unknown): CopyError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(CopyError);
    return e as CopyError;
  }
  throw new Error("expected a throw");
}

async function pools() {
  const a = createPool({ kind: "cpu", layout, pages: 8 });
  const b = createPool({ kind: "cpu", layout, pages: 8 });
  await a.fill(1);
  await b.fill(2);
  return { a, b, before: await digests(b) };
}

describe("copy: bad input (CPU twin)", () => {
  it("duplicate pages in a scatter target are rejected and nothing is written", async () => {
    const { a, b, before } = await pools();
    const e = await rejection(scatter(a, b, [0, 1, 2], [5, 6, 5]));
    expect(e.code).toBe("E_DUPLICATE");
    expect(e.message).toMatch(/dstPages has page 5 twice \(at 0 and 2\)/);
    expect(await digests(b)).toEqual(before);
    // Duplicate sources are fine (one page copied to two places).
    await copyPages(a, b, [3, 3], [0, 1]);
    const [d3] = await digests(a, [3]);
    expect(await digests(b, [0, 1])).toEqual([d3, d3]);
  });

  it("indices past the pool, negative or fractional ones are rejected and nothing is written", async () => {
    const { a, b, before } = await pools();
    let e = await rejection(copyPages(a, b, [0, 8], [0, 1]));
    expect(e.code).toBe("E_RANGE");
    expect(e.message).toMatch(/srcPages\[1\] = 8 is past the pool \(8 pages\)/);
    e = await rejection(copyPages(a, b, [0, 1], [1, 4_000_000_000]));
    expect(e.code).toBe("E_RANGE");
    e = await rejection(copyPages(a, b, [-1], [0]));
    expect(e.code).toBe("E_RANGE");
    e = await rejection(copyPages(a, b, [0.5], [0]));
    expect(e.code).toBe("E_RANGE");
    e = await rejection(copyPages(a, b, [0, 1], [0]));
    expect(e.code).toBe("E_ARG");
    e = await rejection(digests(a, [9]));
    expect(e.code).toBe("E_RANGE");
    e = await rejection(a.read(a.bytes - 4, 5));
    expect(e.code).toBe("E_RANGE");
    e = await rejection(a.write(a.bytes, Buffer.alloc(1)));
    expect(e.code).toBe("E_RANGE");
    expect(await digests(b)).toEqual(before);
  });

  it("zero-sized layouts and pools are rejected", () => {
    for (const k of ["pageSize", "layers", "heads", "headDim", "dtypeSize"] as const) {
      const e = thrown(() => createPool({ kind: "cpu", layout: { ...layout, [k]: 0 }, pages: 4 }));
      expect(e.code).toBe("E_LAYOUT");
      expect(e.message).toMatch(new RegExp(`layout\\.${k} must be >= 1 \\(zero-sized layout\\)`));
    }
    expect(thrown(() => createPool({ kind: "cpu", layout, pages: 0 })).code).toBe("E_LAYOUT");
    expect(
      thrown(() => createPool({ kind: "cpu", layout: { ...layout, kv: 3 as 2 }, pages: 1 })).code,
    ).toBe("E_LAYOUT");
    expect(
      thrown(() =>
        createPool({
          kind: "cpu",
          layout: { ...layout, layout: "head_first" as "page_first" },
          pages: 1,
        }),
      ).code,
    ).toBe("E_LAYOUT");
    expect(
      thrown(() => createPool({ kind: "cpu", layout: { ...layout, headDim: 1.5 }, pages: 1 })).code,
    ).toBe("E_LAYOUT");
    expect(thrown(() => createPool({ kind: "gpu" as "cpu", layout, pages: 1 })).code).toBe("E_ARG");
  });

  it("mismatched layouts are rejected (the layout kind alone may differ)", async () => {
    const a = createPool({ kind: "cpu", layout, pages: 4 });
    const b = createPool({ kind: "cpu", layout: { ...layout, headDim: 16 }, pages: 4 });
    const e = await rejection(copyPages(a, b, [0], [0]));
    expect(e.code).toBe("E_LAYOUT");
    expect(e.message).toMatch(/headDim 8 vs 16/);
    const c = createPool({ kind: "cpu", layout: { ...layout, layout: "page_first" }, pages: 4 });
    await expect(copyPages(a, c, [0], [0])).resolves.toMatchObject({
      pages: 1,
      granularity: "token",
    });
  });

  it("a copy within one pool must not read and write the same page", async () => {
    const { a } = await pools();
    const e = await rejection(copyPages(a, a, [0, 1, 2], [2, 3, 4]));
    expect(e.code).toBe("E_DUPLICATE");
    await copyPages(a, a, [0, 1, 2], [3, 4, 5]);
    expect(await digests(a, [3, 4, 5])).toEqual(await digests(a, [0, 1, 2]));
  });

  it("a pool freed while a copy is in flight: the copy completes intact, then the memory goes", async () => {
    const big: PoolLayout = {
      layout: "page_first",
      pageSize: 64,
      layers: 16,
      heads: 8,
      headDim: 128,
      dtypeSize: 2,
    };
    const src = createPool({ kind: "cpu", layout: big, pages: 16 });
    const dst = createPool({ kind: "cpu", layout: big, pages: 16 });
    await src.fill(9);
    const want = await digests(src);
    const pages = Array.from({ length: 16 }, (_, i) => 15 - i);
    const inflight = copyPages(src, dst, pages, pages);
    expect(src.inFlight).toBe(1);
    src.free();
    expect(src.freed).toBe(true);
    const st = await inflight;
    expect(st.pages).toBe(16);
    expect(await digests(dst)).toEqual(want);
    // The freed pool rejects everything after, and free() is idempotent.
    expect((await rejection(copyPages(src, dst, [0], [0]))).code).toBe("E_FREED");
    expect((await rejection(digests(src, [0]))).code).toBe("E_FREED");
    expect((await rejection(src.fill(1))).code).toBe("E_FREED");
    src.free();
    // Freeing the destination mid-copy is just as safe.
    const again = copyPages(dst, createPool({ kind: "cpu", layout: big, pages: 16 }), pages, pages);
    dst.free();
    await expect(again).resolves.toMatchObject({ pages: 16 });
  });

  it("non-pools and wrong page-list types are rejected", async () => {
    const { a } = await pools();
    expect((await rejection(copyPages({} as typeof a, a, [0], [1]))).code).toBe("E_ARG");
    expect((await rejection(copyPages(a, a, "0" as unknown as number[], [1]))).code).toBe("E_ARG");
    expect((await rejection(digests(a, [0], { engine: "gpu" }))).code).toBe("E_DEVICE");
  });

  it("CUDA pools on a host without CUDA fail with a clean error, and never mix with cpu pools", async () => {
    const cuda = cudaStatus();
    if (cuda.available) {
      const d = createPool({ kind: "cuda-device", layout, pages: 2 });
      const c = createPool({ kind: "cpu", layout, pages: 2 });
      const e = await rejection(copyPages(d, c, [0], [0]));
      expect(e.code).toBe("E_DEVICE");
      d.free();
      return;
    }
    for (const kind of ["cuda-device", "cuda-pinned"] as const) {
      const e = thrown(() => createPool({ kind, layout, pages: 2 }));
      expect(["E_CUDA", "E_DEVICE"]).toContain(e.code);
      if (e.code === "E_CUDA") {
        expect(e.cudaError?.name).toMatch(/^cuda/);
        expect(typeof e.cudaError?.code).toBe("number");
        expect(e.message).toContain(e.cudaError!.name);
      }
    }
  });
});

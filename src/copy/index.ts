// GPU block copy primitives over the native addon: page pools laid out like SGLang HiCache's host
// pools, batched gather/scatter by page-index lists (Promises; the work runs on a worker thread),
// and per-page SHA-256 digests to check that data survived a round trip.
//
//   const dev = createPool({ kind: "cuda-device", layout, pages: 1024 });
//   const host = createPool({ kind: "cuda-pinned", layout: { ...layout, layout: "page_first" }, pages: 4096 });
//   await gather(dev, host, [7, 8, 9, 100], [0, 1, 2, 3]);   // device pages -> host slots
//   await scatter(host, dev, [0, 1, 2, 3], [7, 8, 9, 100]);  // back
//   (await digests(dev, [7, 8])) ...
//
// `kind: "cpu"` is the CPU twin: the same API, the same index arithmetic, ordinary host memory.
import {
  nativeCopy,
  type NativeBuildInfo,
  type NativeCopyStats,
  type NativeLayoutInfo,
  type PoolHandle,
} from "./native.js";

export type PoolKind = "cpu" | "cuda-device" | "cuda-pinned";
/** SGLang HiCache host-pool layouts (pool_host/mha.py init_kv_buffer). */
export type LayoutKind = "layer_first" | "page_first" | "page_first_direct";

export interface PoolLayout {
  layout: LayoutKind;
  /** Tokens per page. */
  pageSize: number;
  layers: number;
  /** 2: K and V (MHA, default); 1: one latent item per token and layer (MLA). */
  kv?: 1 | 2;
  /** KV heads (per rank). */
  heads: number;
  headDim: number;
  /** Bytes per element (bf16/fp16: 2, fp8: 1, fp32: 4). */
  dtypeSize: number;
}

export interface CreatePoolOptions {
  kind: PoolKind;
  layout: PoolLayout;
  pages: number;
  /** CUDA device index (cuda-* kinds), default 0. */
  device?: number;
}

export type CopyErrorCode =
  | "E_ARG"
  | "E_RANGE"
  | "E_DUPLICATE"
  | "E_LAYOUT"
  | "E_DEVICE"
  | "E_FREED"
  | "E_CUDA"
  | "E_NOMEM";

/** Every failure of this API: `code` says which kind; CUDA failures carry the CUDA error's name and code. */
export class CopyError extends Error {
  readonly code: CopyErrorCode;
  readonly cudaError?: { name: string; code: number };
  constructor(
    code: CopyErrorCode,
    message: string,
    cudaError?: { name: string; code: number },
    cause?: unknown,
  ) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "CopyError";
    this.code = code;
    if (cudaError) this.cudaError = cudaError;
  }
}

const CODES = new Set([
  "E_ARG",
  "E_RANGE",
  "E_DUPLICATE",
  "E_LAYOUT",
  "E_DEVICE",
  "E_FREED",
  "E_CUDA",
  "E_NOMEM",
]);

function wrap(err: unknown): CopyError {
  if (err instanceof CopyError) return err;
  const e = err as {
    code?: unknown;
    message?: unknown;
    cudaError?: { name: string; code: number };
  };
  const msg = typeof e?.message === "string" ? e.message : String(err);
  if (typeof e?.code === "string" && CODES.has(e.code))
    return new CopyError(e.code as CopyErrorCode, msg, e.cudaError, err);
  return new CopyError("E_ARG", msg, undefined, err);
}

function call<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    throw wrap(err);
  }
}

async function callAsync<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw wrap(err);
  }
}

/** Page lists: a Uint32Array, or numbers (each a non-negative integer < 2^32). */
export type PageList = Uint32Array | readonly number[];

function pageArray(pages: PageList, what: string): Uint32Array {
  if (pages instanceof Uint32Array) return pages;
  if (!Array.isArray(pages))
    throw new CopyError("E_ARG", `${what} must be a Uint32Array or an array of page indices`);
  const out = new Uint32Array(pages.length);
  for (let i = 0; i < pages.length; i++) {
    const p = pages[i];
    if (typeof p !== "number" || !Number.isInteger(p) || p < 0 || p > 0xffffffff) {
      throw new CopyError(
        "E_RANGE",
        `${what}[${i}] = ${String(p)} is not a page index (an integer in [0, 2^32))`,
      );
    }
    out[i] = p;
  }
  return out;
}

function iota(n: number): Uint32Array {
  const a = new Uint32Array(n);
  for (let i = 0; i < n; i++) a[i] = i;
  return a;
}

export type LayoutInfo = NativeLayoutInfo;

/** Sizes of a layout (validates it: zero-sized or absurd layouts throw E_LAYOUT). */
export function layoutInfo(layout: PoolLayout): LayoutInfo {
  return call(() => nativeCopy().copyLayoutInfo(layout));
}

export class Pool {
  readonly kind: PoolKind;
  readonly layout: Readonly<PoolLayout>;
  readonly pages: number;
  readonly device: number;
  readonly pageBytes: number;
  readonly bytes: number;
  /** @internal */
  handle: PoolHandle;

  /** @internal use createPool() */
  constructor(opts: CreatePoolOptions, handle: PoolHandle, pageBytes: number) {
    this.kind = opts.kind;
    this.layout = Object.freeze({ ...opts.layout, kv: opts.layout.kv ?? 2 });
    this.pages = opts.pages;
    this.device = opts.kind === "cpu" ? -1 : (opts.device ?? 0);
    this.pageBytes = pageBytes;
    this.bytes = pageBytes * opts.pages;
    this.handle = handle;
  }

  get freed(): boolean {
    return nativeCopy().copyPoolInfo(this.handle).freed;
  }

  /** Jobs (copies, digests, ...) still using this pool's memory. */
  get inFlight(): number {
    return nativeCopy().copyPoolInfo(this.handle).inFlight ?? 0;
  }

  /**
   * Frees the pool: at once unusable (E_FREED); its memory is released when the last copy or
   * digest still using it completes, so freeing mid-copy is safe. Idempotent.
   */
  free(): void {
    nativeCopy().copyFreePool(this.handle);
  }

  /** Deterministic pseudo-random contents from `seed` (the same bytes for every kind). */
  fill(seed: number): Promise<void> {
    return callAsync(() => nativeCopy().copyFill(this.handle, seed));
  }

  /** Raw bytes [offset, offset + length) of the pool's memory. */
  read(offset: number, length: number): Promise<Buffer> {
    return callAsync(() => nativeCopy().copyRead(this.handle, offset, length));
  }

  write(offset: number, data: Uint8Array): Promise<void> {
    return callAsync(() => nativeCopy().copyWrite(this.handle, offset, data));
  }

  digests(pages?: PageList, opts?: DigestOptions): Promise<string[]> {
    return digests(this, pages, opts);
  }
}

/** Allocates a pool: `cpu` (CPU twin, host memory), `cuda-device` (cudaMalloc) or `cuda-pinned` (cudaHostAlloc). */
export function createPool(opts: CreatePoolOptions): Pool {
  return call(() => {
    const n = nativeCopy();
    if (!opts || typeof opts !== "object")
      throw new CopyError("E_ARG", "createPool expects { kind, layout, pages }");
    const info = n.copyLayoutInfo(opts.layout);
    const handle = n.copyCreatePool(opts.kind, opts.layout, opts.pages, opts.device);
    return new Pool(opts, handle, info.pageBytes);
  });
}

export type CopyStats = NativeCopyStats;

export interface CopyOptions {
  /** Runs of at least this many consecutive pages become single copies; 0: all through the kernel. Default 2. */
  coalesceMinPages?: number;
}

function checkPool(p: unknown, what: string): Pool {
  if (!(p instanceof Pool))
    throw new CopyError("E_ARG", `${what} must be a Pool from createPool()`);
  return p;
}

/**
 * Copies page srcPages[i] of `src` to page dstPages[i] of `dst`, for every i, on a worker thread.
 * Rejects (CopyError) on: lists of different lengths, an index past a pool (E_RANGE), a page twice
 * in dstPages or a page both read and written within one pool (E_DUPLICATE), layouts whose dims
 * differ (E_LAYOUT; the layout kinds may differ: the copy converts), pools of different devices or
 * a cpu pool with a CUDA one (E_DEVICE), a freed pool (E_FREED), and any CUDA error (E_CUDA).
 */
export function copyPages(
  src: Pool,
  dst: Pool,
  srcPages: PageList,
  dstPages: PageList,
  opts: CopyOptions = {},
): Promise<CopyStats> {
  return callAsync(async () => {
    const s = checkPool(src, "src"),
      d = checkPool(dst, "dst");
    const sp = pageArray(srcPages, "srcPages"),
      dp = pageArray(dstPages, "dstPages");
    const stats: NativeCopyStats = await nativeCopy().copyPages(
      s.handle,
      d.handle,
      sp,
      dp,
      opts.coalesceMinPages,
    );
    return stats;
  });
}

/** Gathers the (scattered) pages `srcPages` of `src` into `dst` at `dstPages` (default 0..n-1). */
export function gather(
  src: Pool,
  dst: Pool,
  srcPages: PageList,
  dstPages?: PageList | null,
  opts?: CopyOptions,
): Promise<CopyStats> {
  return callAsync(async () => {
    const sp = pageArray(srcPages, "srcPages");
    return copyPages(src, dst, sp, dstPages ?? iota(sp.length), opts);
  });
}

/** Scatters pages of `src` (`srcPages`, default 0..n-1) to the pages `dstPages` of `dst`. */
export function scatter(
  src: Pool,
  dst: Pool,
  srcPages: PageList | null | undefined,
  dstPages: PageList,
  opts?: CopyOptions,
): Promise<CopyStats> {
  return callAsync(async () => {
    const dp = pageArray(dstPages, "dstPages");
    return copyPages(src, dst, srcPages ?? iota(dp.length), dp, opts);
  });
}

export interface DigestOptions {
  /** auto: GPU for cuda-device pools, CPU (SHA-NI when present) otherwise. */
  engine?: "auto" | "cpu" | "gpu";
}

/**
 * SHA-256 of each page (hex), over the page's bytes in canonical order (K/V, layer, token, head,
 * dim), so a page has the same digest in every layout. Default: every page of the pool.
 */
export function digests(pool: Pool, pages?: PageList, opts: DigestOptions = {}): Promise<string[]> {
  return callAsync(async () => {
    const p = checkPool(pool, "pool");
    const list = pages === undefined ? iota(p.pages) : pageArray(pages, "pages");
    const raw = await nativeCopy().copyDigests(p.handle, list, opts.engine ?? "auto");
    const out: string[] = new Array(list.length);
    for (let i = 0; i < list.length; i++)
      out[i] = raw.subarray(32 * i, 32 * i + 32).toString("hex");
    return out;
  });
}

export type BuildInfo = NativeBuildInfo;

/** What the addon was built with (CUDA, SHA-NI) and the CUDA runtime/driver/devices it finds now. */
export function buildInfo(): BuildInfo {
  return call(() => nativeCopy().buildInfo());
}

/** Whether CUDA pools can be created here, and if not, one line saying why. */
export function cudaStatus(): { available: boolean; reason?: string; info: BuildInfo["cuda"] } {
  const c = buildInfo().cuda;
  if (!c.built)
    return {
      available: false,
      reason: "the addon was built without CUDA (npm run build:cuda)",
      info: c,
    };
  if (!c.available) {
    const e = c.error;
    return {
      available: false,
      reason: e ? `no usable CUDA device: ${e.name} (${e.code})` : "no CUDA device",
      info: c,
    };
  }
  return { available: true, info: c };
}

/**
 * A contiguous-buffer baseline: `cuda` times cudaMemcpyAsync of one device <-> pinned buffer (the
 * link's practical limit); `cpu` times memcpy of one host buffer. Best of `iters`, in seconds.
 */
export function memcpyBaseline(
  backend: "cpu" | "cuda",
  bytes: number,
  direction: "d2h" | "h2d",
  iters = 5,
  device = 0,
): Promise<number> {
  return callAsync(() => nativeCopy().copyMemcpyBaseline(backend, bytes, direction, iters, device));
}

const DTYPES: Record<string, number> = {
  fp32: 4,
  float32: 4,
  f32: 4,
  bf16: 2,
  bfloat16: 2,
  fp16: 2,
  float16: 2,
  f16: 2,
  half: 2,
  fp8: 1,
  fp8_e4m3: 1,
  fp8_e5m2: 1,
  e4m3: 1,
  e5m2: 1,
  int8: 1,
  uint8: 1,
};

/** Bytes per element of a dtype name (bf16 -> 2, fp8_e4m3 -> 1, ...). */
export function dtypeSize(name: string): number {
  const s = DTYPES[name.toLowerCase()];
  if (!s)
    throw new CopyError(
      "E_LAYOUT",
      `unknown dtype '${name}' (known: ${Object.keys(DTYPES).join(", ")})`,
    );
  return s;
}

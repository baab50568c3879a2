// The copy area's native functions (native/addon/copy.cpp), reached through the one addon loader.
import { addonPart } from "../addon.js";

/** An opaque pool handle owned by the addon. */
export type PoolHandle = { readonly __kvctlPool: unique symbol };

export interface NativeLayout {
  layout: string;
  pageSize: number;
  layers: number;
  kv?: number;
  heads: number;
  headDim: number;
  dtypeSize: number;
}

export interface NativeCopyStats {
  pages: number;
  bytes: number;
  /** Coalesced runs of consecutive pages (one 2D copy each) and the pages they covered. */
  runs: number;
  coalescedPages: number;
  /** Pages copied by the scatter kernel (or the CPU twin's chunk loop). */
  kernelPages: number;
  /** Chunking of the copy: native segments (same layout), rows, or tokens (layout conversion). */
  granularity: "native" | "row" | "token";
  /** Time on the worker thread, from the first enqueue to completion. */
  seconds: number;
}

export interface NativeLayoutInfo {
  pageBytes: number;
  tokenBytes: number;
  /** Contiguous pieces per page in this layout (layer_first: kv*layers; page_first*: kv). */
  segments: number;
  segmentBytes: number;
}

export interface NativeBuildInfo {
  sha256: { shaNi: boolean; backend: "sha-ni" | "portable" };
  napiVersion: number;
  compiler?: string;
  layouts: string[];
  cuda: {
    built: boolean;
    available: boolean;
    runtimeVersion: number;
    driverVersion: number;
    deviceCount: number;
    error?: { name: string; code: number; message: string };
    devices: {
      index: number;
      name: string;
      pciBusId: string;
      computeCapability: string;
      totalBytes: number;
      freeBytes: number;
      smCount: number;
    }[];
  };
}

export interface NativeCopy {
  copyLayoutInfo(layout: NativeLayout): NativeLayoutInfo;
  copyCreatePool(kind: string, layout: NativeLayout, pages: number, device?: number): PoolHandle;
  copyFreePool(h: PoolHandle): { freed: boolean; deferredForJobs: number };
  copyPoolInfo(h: PoolHandle): { freed: boolean; inFlight?: number };
  copyPages(
    src: PoolHandle,
    dst: PoolHandle,
    srcPages: Uint32Array,
    dstPages: Uint32Array,
    coalesceMinPages?: number,
  ): Promise<NativeCopyStats>;
  copyDigests(h: PoolHandle, pages: Uint32Array, engine: "auto" | "cpu" | "gpu"): Promise<Buffer>;
  copyFill(h: PoolHandle, seed: number): Promise<void>;
  copyRead(h: PoolHandle, offset: number, length: number): Promise<Buffer>;
  copyWrite(h: PoolHandle, offset: number, data: Uint8Array): Promise<void>;
  copyMemcpyBaseline(
    backend: "cpu" | "cuda",
    bytes: number,
    direction: "d2h" | "h2d",
    iters: number,
    device?: number,
  ): Promise<number>;
  buildInfo(): NativeBuildInfo;
}

/** The addon, checked to carry the copy area (an addon built before it existed does not). */
export function nativeCopy(): NativeCopy {
  return addonPart<NativeCopy>("copy", ["copyCreatePool", "buildInfo"]);
}

// The one loader of the native addon (build/Release/kvctl.node, or a prebuild in prebuilds/),
// through node-gyp-build. Every TypeScript module that needs native code imports it from here.
// KVCTL_ADDON=/path/to/kvctl.node loads a specific build instead (e.g. build-cuda/Release).
import { createRequire } from "node:module";
import { packageRoot } from "./paths.js";

const require = createRequire(import.meta.url);
export { packageRoot };

/** SGLang's page-hash chain over token pages (CPU: sglangChain, GPU: sglangChainCuda). */
export type SglangChainFn = (
  tokens: Uint32Array,
  offsets: Uint32Array | null,
  pageSize: number,
  bigram: boolean,
  prior: Uint8Array | null,
) => { pageOffsets: Uint32Array; digests: Buffer };

/** The hash core's native functions (native/addon/hash.cpp, cuda.cpp). */
export interface NativeHash {
  sha256(data: Uint8Array): Buffer;
  sha256Backend(): "sha-ni" | "portable";
  setSha256Backend(backend: "sha-ni" | "portable"): boolean;
  sglangChain: SglangChainFn;
  digestsToInt64(digests: Uint8Array, namespaceSeed: Uint8Array | null): BigInt64Array;
  digestsToHex(digests: Uint8Array): string[];
  namespacedBlockHashes(hashes: BigInt64Array, seed: Uint8Array): BigInt64Array;
  namespaceSeed(
    kind: "storage" | "event",
    extraKey: string | null,
    cacheSalt: string | null,
  ): Buffer | null;
  cacheSaltSeed(cacheSalt: string): Buffer;
  mooncakeObjectKeys(
    digests: Uint8Array,
    layout: {
      prefix?: string;
      mla?: boolean;
      tpRank?: number;
      ppRank?: number;
      ppSize?: number;
      splitFactor?: number;
    },
  ): string[];
  xxh3(data: Uint8Array, seed: bigint): bigint;
  dynamoSeed(loraName: string | null, cacheNamespace: string | null): bigint;
  dynamoHashes(
    tokens: Uint32Array,
    offsets: Uint32Array | null,
    blockSize: number,
    eagle: boolean,
    seed: bigint,
  ): { blockOffsets: Uint32Array; local: BigUint64Array; sequence: BigUint64Array };
  cudaInfo(): { built: boolean; available: boolean; devices: number; error?: string };
  /** sglangChain on the GPU (native/cuda): the same arguments and result. */
  sglangChainCuda: SglangChainFn;
}

/**
 * What every build of the addon exports. The events, index and copy areas declare their own
 * interfaces beside their TypeScript and reach them through addonPart, which checks that the
 * loaded build carries them (an older build may not).
 */
export type NativeAddon = NativeHash;

let cached: NativeAddon | undefined;

/** Loads the addon once; throws an Error that says how to build it when it is missing. */
export function loadAddon(): NativeAddon {
  if (cached) return cached;
  try {
    const explicit = process.env.KVCTL_ADDON;
    cached = (explicit ? require(explicit) : require("node-gyp-build")(packageRoot)) as NativeAddon;
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    throw new Error(
      `kvctl native addon not found or not loadable (${why.split("\n")[0]}). ` +
        "Build it with `npm run build:native` (needs cmake and a C++17 compiler; the rest comes from npm).",
      { cause: err },
    );
  }
  return cached;
}

/**
 * The part of the addon an area describes (`T`), after checking that the loaded build exports
 * each of `probe`; throws naming the first one missing (a build that predates the area). The one
 * place the addon's untyped exports are read as an area's interface.
 */
export function addonPart<T extends object>(area: string, probe: readonly (keyof T & string)[]): T {
  const exports: object = loadAddon();
  for (const name of probe) {
    if (typeof (exports as Record<string, unknown>)[name] !== "function") {
      throw new Error(
        `the loaded kvctl addon has no ${name} (${area}): it predates it; rebuild with \`npm run build:native\``,
      );
    }
  }
  return exports as T;
}

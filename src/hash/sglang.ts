// SGLang page hashes (hashing.md §1) over the native core, as the pinned SGLang (0.5.23) computes
// them. Three views of one chain:
//   sglangPageHashes / storageKeys: node.hash_value, the chain HiCache storage keys use. With an
//     extraKey or cacheSalt it starts from storage_namespace_seed(extra_key, cache_salt).
//   blockHashes: the int64 the worker's KV events publish. The event chain starts from
//     SHA256("sglang-cache-salt-v1\0" + salt) for salted requests (extra_key does not seed it);
//     then each int64 is namespaced with kv_event_namespace_seed (see BlockHashOptions).
import { loadAddon } from "../addon.js";
import { HashInputError, parseOptions } from "./errors.js";
import { type SequenceBatch, type Tokens, toBatch, toTokenArray } from "./input.js";
import {
  type BlockHashOptions,
  type MooncakeOptions,
  type SglangOptions,
  blockHashOptionsSchema,
  mooncakeLayoutSchema,
  mooncakeOptionsSchema,
  sglangOptionsSchema,
} from "./options.js";

export interface PageDigests {
  /** pageOffsets[s] .. pageOffsets[s + 1] are sequence s's pages. */
  pageOffsets: Uint32Array;
  /** 32 bytes a page. */
  digests: Buffer;
}

function priorBytes(prior: string | Uint8Array | null | undefined): Uint8Array | null {
  if (prior == null) return null;
  return typeof prior === "string" ? Buffer.from(prior, "hex") : prior;
}

type ChainKind = "storage" | "event";

function chain(
  batch: { tokens: Uint32Array; offsets: Uint32Array | null },
  o: SglangOptions,
  kind: ChainKind,
  device: "cpu" | "cuda" = "cpu",
): PageDigests {
  const native = loadAddon();
  let prior = priorBytes(o.prior);
  if (!prior) {
    const extraKey = o.extraKey ?? null;
    const cacheSalt = o.cacheSalt || null; // RadixKey: `cache_salt or None`
    if (kind === "storage") prior = native.namespaceSeed("storage", extraKey, cacheSalt);
    else if (cacheSalt !== null) prior = native.cacheSaltSeed(cacheSalt);
  }
  // Inputs are checked above; the addon re-checks them and names the argument if not.
  const run = device === "cuda" ? native.sglangChainCuda : native.sglangChain;
  return run(batch.tokens, batch.offsets, o.pageSize, o.bigram ?? false, prior);
}

function eventSeed(o: BlockHashOptions): Buffer | null {
  const extraKey = o.extraKey ?? null;
  const cacheSalt = o.cacheSalt || null;
  if ((o.eventFormat ?? "sglang") === "dynamo")
    return loadAddon().namespaceSeed("event", extraKey, cacheSalt);
  return loadAddon().namespaceSeed("event", o.extraKeyIsLora ? extraKey : null, null);
}

/** Page digests (32 raw bytes each, concatenated) of one sequence's full pages. */
export function sglangPageHashes(tokens: Tokens, options: SglangOptions): Buffer {
  const fn = "sglangPageHashes";
  const o = parseOptions(fn, "options", sglangOptionsSchema, options);
  return chain({ tokens: toTokenArray(fn, "tokens", tokens), offsets: null }, o, "storage").digests;
}

/** Page digests of many sequences in one native call. */
export function sglangPageHashesBatch(batch: SequenceBatch, options: SglangOptions): PageDigests {
  const fn = "sglangPageHashesBatch";
  const o = parseOptions(fn, "options", sglangOptionsSchema, options);
  return chain(toBatch(fn, batch), o, "storage");
}

/** HiCache storage keys (64 lowercase hex chars a page) of one sequence. */
export function storageKeys(tokens: Tokens, options: SglangOptions): string[] {
  return loadAddon().digestsToHex(sglangPageHashes(tokens, options));
}

export function storageKeysBatch(
  batch: SequenceBatch,
  options: SglangOptions,
): { pageOffsets: Uint32Array; keys: string[] } {
  const r = sglangPageHashesBatch(batch, options);
  return { pageOffsets: r.pageOffsets, keys: loadAddon().digestsToHex(r.digests) };
}

/** One run of the event chain: its digests and the int64 hashes they publish as. */
function eventChain(
  fn: string,
  tokens: Tokens,
  options: BlockHashOptions,
): { digests: Buffer; hashes: BigInt64Array } {
  const o = parseOptions(fn, "options", blockHashOptionsSchema, options);
  const { digests } = chain(
    { tokens: toTokenArray(fn, "tokens", tokens), offsets: null },
    o,
    "event",
  );
  return { digests, hashes: loadAddon().digestsToInt64(digests, eventSeed(o)) };
}

/** The int64 block hashes the worker publishes in BlockStored / BlockRemoved events. */
export function blockHashes(tokens: Tokens, options: BlockHashOptions): BigInt64Array {
  return eventChain("blockHashes", tokens, options).hashes;
}

/** blockHashes and the event digests behind them (eventPageHashes), from one run of the chain. */
export function blockHashesWithDigests(
  tokens: Tokens,
  options: BlockHashOptions,
): { digests: Buffer; hashes: BigInt64Array } {
  return eventChain("blockHashesWithDigests", tokens, options);
}

export function blockHashesBatch(
  batch: SequenceBatch,
  options: BlockHashOptions,
): { pageOffsets: Uint32Array; hashes: BigInt64Array } {
  const fn = "blockHashesBatch";
  const o = parseOptions(fn, "options", blockHashOptionsSchema, options);
  const r = chain(toBatch(fn, batch), o, "event");
  return {
    pageOffsets: r.pageOffsets,
    hashes: loadAddon().digestsToInt64(r.digests, eventSeed(o)),
  };
}

/** The event digests (32 bytes a page) behind blockHashes, before namespacing: a child node's prior. */
export function eventPageHashes(tokens: Tokens, options: SglangOptions): Buffer {
  const fn = "eventPageHashes";
  const o = parseOptions(fn, "options", sglangOptionsSchema, options);
  return chain({ tokens: toTokenArray(fn, "tokens", tokens), offsets: null }, o, "event").digests;
}

/** SGLang's hash_str_to_int64: the signed int64 of a 64-hex digest's first 8 bytes. */
export function storageKeyToInt64(keys: readonly string[]): BigInt64Array {
  const fn = "storageKeyToInt64";
  const buf = Buffer.alloc(keys.length * 32);
  keys.forEach((k, i) => {
    if (typeof k !== "string" || !/^[0-9a-fA-F]{64}$/.test(k))
      throw new HashInputError(fn, `keys[${i}]`, "must be 64 hex chars");
    buf.write(k, i * 32, "hex");
  });
  return loadAddon().digestsToInt64(buf, null);
}

/** Mooncake Store object keys of one sequence's pages (2 per page for MHA, 1 for MLA). */
export function mooncakeObjectKeys(tokens: Tokens, options: MooncakeOptions): string[] {
  const fn = "mooncakeObjectKeys";
  const { layout, ...rest } = parseOptions(fn, "options", mooncakeOptionsSchema, options);
  return loadAddon().mooncakeObjectKeys(sglangPageHashes(tokens, rest), layout ?? {});
}

/** Mooncake object keys for storage keys already computed (64-hex each). */
export function mooncakeObjectKeysForStorageKeys(
  keys: readonly string[],
  layout: MooncakeOptions["layout"] = {},
): string[] {
  const fn = "mooncakeObjectKeysForStorageKeys";
  const l = parseOptions(fn, "layout", mooncakeLayoutSchema, layout);
  const buf = Buffer.alloc(keys.length * 32);
  keys.forEach((k, i) => {
    if (typeof k !== "string" || !/^[0-9a-f]{64}$/.test(k))
      throw new HashInputError(fn, `keys[${i}]`, "must be 64 lowercase hex chars");
    buf.write(k, i * 32, "hex");
  });
  return loadAddon().mooncakeObjectKeys(buf, l);
}

/**
 * sglangPageHashesBatch on the GPU (CUDA build and a device needed); throws
 * "CUDA unavailable: <cudaGetErrorName> (<code>)" otherwise.
 */
export function sglangPageHashesGpu(batch: SequenceBatch, options: SglangOptions): PageDigests {
  const fn = "sglangPageHashesGpu";
  const o = parseOptions(fn, "options", sglangOptionsSchema, options);
  return chain(toBatch(fn, batch), o, "storage", "cuda");
}

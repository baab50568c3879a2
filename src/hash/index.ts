// The typed hash API over the native core. Nothing here computes a hash itself.
import { loadAddon } from "../addon.js";

export { HashInputError } from "./errors.js";
export type { SequenceBatch, Tokens } from "./input.js";
export type {
  BlockHashOptions,
  DynamoOptions,
  MooncakeLayout,
  MooncakeOptions,
  SglangOptions,
} from "./options.js";
export {
  type PageDigests,
  blockHashes,
  blockHashesBatch,
  blockHashesWithDigests,
  eventPageHashes,
  mooncakeObjectKeys,
  mooncakeObjectKeysForStorageKeys,
  sglangPageHashes,
  sglangPageHashesBatch,
  sglangPageHashesGpu,
  storageKeyToInt64,
  storageKeys,
  storageKeysBatch,
} from "./sglang.js";
export {
  type DynamoHashes,
  dynamoBlockHashes,
  dynamoHashesBatch,
  dynamoSeed,
  dynamoSequenceHashes,
} from "./dynamo.js";

/** Which SHA-256 path the CPU uses ("sha-ni" or "portable"). */
export function sha256Backend(): "sha-ni" | "portable" {
  return loadAddon().sha256Backend();
}

/** Forces a SHA-256 path (tests, benchmarks); false when the CPU lacks SHA-NI. */
export function setSha256Backend(backend: "sha-ni" | "portable"): boolean {
  return loadAddon().setSha256Backend(backend);
}

/** Whether the addon has CUDA kernels and a usable device, and if not, why. */
export function cudaInfo(): {
  built: boolean;
  available: boolean;
  devices: number;
  error?: string;
} {
  return loadAddon().cudaInfo();
}

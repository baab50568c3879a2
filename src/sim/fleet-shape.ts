// What sizes a run's workers: the profile's SGLang settings and the fleet's pools.

/** The profile's SGLang settings (python/kvctl_sim/__main__.py `_shape`). */
export interface ProfileShape {
  page_size: number;
  device_kv_tokens: number;
  host_kv_tokens: number;
  max_prefill_tokens: number;
  chunked_prefill_size: number;
  max_running_requests: number;
  layers: number;
  kv_bytes_per_token: number;
  prefill_tokens_per_s: number;
  h2d_tokens_per_s: number;
}

/** HiCache's L3 on every worker: none, a store of its own, or one store the fleet shares. */
export const STORAGE_MODES = ["none", "worker", "shared"] as const;
export type StorageMode = (typeof STORAGE_MODES)[number];

export interface FleetShape {
  pageSize: number;
  deviceTokens: number;
  hostTokens: number;
  chunkedPrefillSize: number;
  storage: StorageMode;
}

#include "dynamo.h"

// The xxHash library itself, compiled into this file so the addon needs no libxxhash.so.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kv {

uint64_t xxh3_64(const void* data, size_t len, uint64_t seed) {
  return XXH3_64bits_withSeed(data, len, seed);
}

uint64_t dynamo_seed(const std::string& lora_name, const std::string& cache_namespace) {
  uint64_t s = kDynamoSeed;
  if (!lora_name.empty()) s += xxh3_64(lora_name.data(), lora_name.size(), 0);
  if (!cache_namespace.empty()) s += xxh3_64(cache_namespace.data(), cache_namespace.size(), 1);
  return s;
}

uint64_t dynamo_block_offsets(const DynamoBatch& b, uint64_t* block_offsets) {
  return batch_block_offsets(b.offsets, b.nseq, b.block_size, b.eagle, block_offsets);
}

void dynamo_local_hashes(const DynamoBatch& b, const uint64_t* block_offsets, uint64_t* out) {
  const size_t window = (b.block_size + (b.eagle ? 1u : 0u)) * sizeof(uint32_t);
  for (size_t s = 0; s < b.nseq; ++s) {
    const uint32_t* t = b.tokens + b.offsets[s];
    for (uint64_t i = 0, n = block_offsets[s + 1] - block_offsets[s]; i < n; ++i) {
      // Tokens are stored little-endian, which is the byte order Dynamo hashes.
      out[block_offsets[s] + i] = xxh3_64(t + i * b.block_size, window, b.seed);
    }
  }
}

void dynamo_sequence_hashes(const uint64_t* local, size_t n, uint64_t* out) {
  for (size_t i = 0; i < n; ++i) {
    if (i == 0) {
      out[0] = local[0];
      continue;
    }
    const uint64_t pair[2] = {out[i - 1], local[i]};  // le64 || le64 on little-endian hosts
    out[i] = xxh3_64(pair, sizeof(pair), kDynamoSeed);
  }
}

}  // namespace kv

// Dynamo KV-router hashes (hashing.md §2; Dynamo lib/kv-router protocols.rs):
//   local[i] = xxh3_64(le32 tokens of block i, seed)   (complete blocks only)
//   seed     = 1337 + xxh3(lora_name, 0) + xxh3(cache_namespace, 1)   (wrapping; "" = absent)
//   seq[0]   = local[0],  seq[i] = xxh3_64(le64(seq[i-1]) || le64(local[i]), 1337)
// EAGLE: each block hashes a window of block_size + 1 tokens with stride block_size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "block_count.h"

namespace kv {

constexpr uint64_t kDynamoSeed = 1337;

uint64_t xxh3_64(const void* data, size_t len, uint64_t seed);
uint64_t dynamo_seed(const std::string& lora_name, const std::string& cache_namespace);

inline uint64_t dynamo_block_count(uint64_t ntokens, uint32_t block_size, bool eagle) {
  return full_block_count(ntokens, block_size, eagle);
}

struct DynamoBatch {
  const uint32_t* tokens = nullptr;
  const uint64_t* offsets = nullptr;  // nseq + 1
  size_t nseq = 0;
  uint32_t block_size = 0;
  bool eagle = false;
  uint64_t seed = kDynamoSeed;
};

uint64_t dynamo_block_offsets(const DynamoBatch& b, uint64_t* block_offsets /* nseq + 1 */);
// Local block hashes per sequence into out[block_offsets[s] ...].
void dynamo_local_hashes(const DynamoBatch& b, const uint64_t* block_offsets, uint64_t* out);
// Sequence hashes, in place over one sequence's local hashes.
void dynamo_sequence_hashes(const uint64_t* local, size_t n, uint64_t* out);

}  // namespace kv

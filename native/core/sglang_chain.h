// SGLang page chains over a batch of sequences (hashing.md §1). Sequence s is
// tokens[offsets[s], offsets[s+1]); only full pages are hashed, as the engine publishes them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kv {

struct ChainBatch {
  const uint32_t* tokens = nullptr;
  const uint64_t* offsets = nullptr;  // nseq + 1 entries, non-decreasing
  size_t nseq = 0;
  uint32_t page_size = 0;
  bool bigram = false;        // EAGLE: each unit is (t_i, t_{i+1}); N+1 raw tokens give N units
  const uint8_t* prior = nullptr;  // 32-byte seed every sequence's first page chains from
};

// page_offsets[s] = first page of sequence s in the output; returns the total page count.
uint64_t sglang_page_offsets(const ChainBatch& b, uint64_t* page_offsets /* nseq + 1 */);

// Writes 32 bytes per page at out + 32 * page_offsets[s]. Pairs of sequences are hashed
// interleaved (see sha256_page_digest2).
void sglang_chain_batch(const ChainBatch& b, const uint64_t* page_offsets, uint8_t* out);

// The published int64 of a digest: first 8 bytes big-endian, two's complement.
inline int64_t digest_to_int64(const uint8_t* d) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | d[i];
  return static_cast<int64_t>(v);
}

// 64 lowercase hex chars (the HiCache storage key).
void digest_to_hex(const uint8_t* d, char out[64]);
std::string digest_hex(const uint8_t* d);

}  // namespace kv

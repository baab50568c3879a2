// Full-block counting shared by the SGLang page chains (sglang_chain.h) and the Dynamo block
// hashes (dynamo.h): both hash only complete blocks, and both lay a batch's blocks out sequence
// after sequence.
#pragma once
#include <cstddef>
#include <cstdint>

#include "hd.h"

namespace kv {

// Complete blocks of `block_size` units in `ntokens` token ids. With `shifted` (SGLang bigram,
// Dynamo EAGLE) a unit reads one token past itself, so ntokens - 1 units. block_size 0: none.
KV_HD KV_INLINE uint64_t full_block_count(uint64_t ntokens, uint32_t block_size, bool shifted) {
  const uint64_t units = shifted ? (ntokens > 0 ? ntokens - 1 : 0) : ntokens;
  return block_size ? units / block_size : 0;
}

// block_offsets[s] = first block of sequence s (tokens offsets[s] .. offsets[s+1]) in a batch of
// nseq sequences; block_offsets[nseq] = the total, which is returned.
inline uint64_t batch_block_offsets(const uint64_t* offsets, size_t nseq, uint32_t block_size, bool shifted,
                                    uint64_t* block_offsets /* nseq + 1 */) {
  uint64_t total = 0;
  for (size_t s = 0; s < nseq; ++s) {
    block_offsets[s] = total;
    total += full_block_count(offsets[s + 1] - offsets[s], block_size, shifted);
  }
  block_offsets[nseq] = total;
  return total;
}

}  // namespace kv

// One SGLang page-hash message, laid out without copying: an optional 32-byte prior digest
// followed by the page's token ids as little-endian u32 (EAGLE bigram pages: the pair
// t_i, t_{i+1} per unit). Shared by the CPU paths and the CUDA kernel.
#pragma once
#include <cstdint>
#include <cstring>

#include "block_count.h"
#include "hd.h"
#include "sha256_portable.h"

namespace kv {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token words are hashed as stored (LE)");

struct PageMessage {
  const uint8_t* prior;    // 32 raw digest bytes, or nullptr at the chain start
  const uint32_t* tokens;  // first raw token of the page
  uint32_t units;          // tokens in the page (bigram: pairs, reading units + 1 raw tokens)
  bool bigram;

  KV_HD uint32_t prefix_len() const { return prior ? 32u : 0u; }
  KV_HD uint64_t length() const { return prefix_len() + uint64_t(units) * (bigram ? 8u : 4u); }
  KV_HD uint64_t blocks() const { return (length() + 8) / 64 + 1; }

  KV_HD uint32_t body_word(uint64_t k) const { return bigram ? tokens[(k >> 1) + (k & 1)] : tokens[k]; }

  // Block i of the padded message: a pointer straight into the tokens when the block lies
  // wholly inside them (most blocks), else assembled into `scratch` (16-byte aligned, 64 B).
  KV_HD const uint8_t* block(uint64_t i, uint8_t* scratch) const {
    const uint64_t start = 64 * i, len = length();
    const uint32_t pre = prefix_len();
    if (!bigram && start >= pre && start + 64 <= len) {
      return reinterpret_cast<const uint8_t*>(tokens) + (start - pre);
    }
    uint32_t* w = reinterpret_cast<uint32_t*>(scratch);
    for (int j = 0; j < 16; ++j) {
      const uint64_t pos = start + 4u * j;  // all lengths are multiples of 4
      uint32_t v;
      if (pos < pre) memcpy(&v, prior + pos, 4);
      else if (pos < len) v = body_word((pos - pre) >> 2);
      else v = (pos == len) ? 0x80u : 0u;  // the 0x80 terminator byte, as a LE word
      w[j] = v;
    }
    if (i + 1 == blocks()) {
      const uint64_t bits = len * 8;
      for (int k = 0; k < 8; ++k) scratch[56 + k] = uint8_t(bits >> (56 - 8 * k));
    }
    return scratch;
  }
};

KV_HD KV_INLINE void sha256_store_digest(const uint32_t h[8], uint8_t out[32]) {
  for (int i = 0; i < 8; ++i) {
    out[4 * i] = uint8_t(h[i] >> 24);
    out[4 * i + 1] = uint8_t(h[i] >> 16);
    out[4 * i + 2] = uint8_t(h[i] >> 8);
    out[4 * i + 3] = uint8_t(h[i]);
  }
}

// Portable page digest: the function the CUDA kernel runs per page.
KV_HD inline void page_digest_portable(const PageMessage& m, uint8_t out[32]) {
  uint32_t h[8];
  sha256_init(h);
  alignas(16) uint8_t scratch[64];
  const uint64_t n = m.blocks();
  for (uint64_t i = 0; i < n; ++i) sha256_compress_portable(h, m.block(i, scratch));
  sha256_store_digest(h, out);
}

// Number of full pages a sequence of `raw_tokens` token ids has (bigram: raw_tokens - 1 units).
KV_HD KV_INLINE uint64_t sglang_full_pages(uint64_t raw_tokens, uint32_t page_size, bool bigram) {
  return full_block_count(raw_tokens, page_size, bigram);
}

// The SGLang chain over one sequence with a per-page digest function: page p chains from page
// p-1's raw digest, page 0 from `prior` (nullptr: the unseeded chain at the tree root).
template <class PageFn>
KV_HD inline void sglang_chain_one(const uint32_t* tokens, uint64_t pages, uint32_t page_size, bool bigram,
                                   const uint8_t* prior, uint8_t* out, PageFn page_fn) {
  for (uint64_t p = 0; p < pages; ++p) {
    PageMessage m{p == 0 ? prior : out + 32 * (p - 1), tokens + p * page_size, page_size, bigram};
    page_fn(m, out + 32 * p);
  }
}

}  // namespace kv

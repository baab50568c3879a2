#include "sglang_chain.h"

#include "block_count.h"
#include "sha256.h"

namespace kv {

uint64_t sglang_page_offsets(const ChainBatch& b, uint64_t* page_offsets) {
  return batch_block_offsets(b.offsets, b.nseq, b.page_size, b.bigram, page_offsets);
}

void sglang_chain_batch(const ChainBatch& b, const uint64_t* page_offsets, uint8_t* out) {
  const uint32_t P = b.page_size;
  const auto digest = [](const PageMessage& m, uint8_t* o) { sha256_page_digest(m, o); };
  size_t s = 0;
  // Two sequences at a time: their chains are independent, so their pages can share the core.
  for (; s + 1 < b.nseq; s += 2) {
    const uint32_t* ta = b.tokens + b.offsets[s];
    const uint32_t* tb = b.tokens + b.offsets[s + 1];
    uint8_t* oa = out + 32 * page_offsets[s];
    uint8_t* ob = out + 32 * page_offsets[s + 1];
    const uint64_t na = page_offsets[s + 1] - page_offsets[s];
    const uint64_t nb = page_offsets[s + 2] - page_offsets[s + 1];
    const uint64_t both = na < nb ? na : nb;
    uint64_t p = 0;
    for (; p < both; ++p) {
      PageMessage ma{p == 0 ? b.prior : oa + 32 * (p - 1), ta + p * P, P, b.bigram};
      PageMessage mb{p == 0 ? b.prior : ob + 32 * (p - 1), tb + p * P, P, b.bigram};
      sha256_page_digest2(ma, oa + 32 * p, mb, ob + 32 * p);
    }
    // The longer chain goes on alone from page p (the shorter one has no pages left).
    sglang_chain_one(ta + p * P, na - p, P, b.bigram, p == 0 ? b.prior : oa + 32 * (p - 1), oa + 32 * p, digest);
    sglang_chain_one(tb + p * P, nb - p, P, b.bigram, p == 0 ? b.prior : ob + 32 * (p - 1), ob + 32 * p, digest);
  }
  if (s < b.nseq) {
    sglang_chain_one(b.tokens + b.offsets[s], page_offsets[s + 1] - page_offsets[s], P, b.bigram, b.prior,
                     out + 32 * page_offsets[s], digest);
  }
}

void digest_to_hex(const uint8_t* d, char out[64]) {
  static const char kHex[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) {
    out[2 * i] = kHex[d[i] >> 4];
    out[2 * i + 1] = kHex[d[i] & 15];
  }
}

std::string digest_hex(const uint8_t* d) {
  std::string s(64, '\0');
  digest_to_hex(d, s.data());
  return s;
}

}  // namespace kv

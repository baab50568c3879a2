#include "sglang_chain.h"

#include "sha256.h"

namespace kv {

uint64_t sglang_page_offsets(const ChainBatch& b, uint64_t* page_offsets) {
  uint64_t total = 0;
  for (size_t s = 0; s < b.nseq; ++s) {
    page_offsets[s] = total;
    total += sglang_full_pages(b.offsets[s + 1] - b.offsets[s], b.page_size, b.bigram);
  }
  page_offsets[b.nseq] = total;
  return total;
}

void sglang_chain_batch(const ChainBatch& b, const uint64_t* page_offsets, uint8_t* out) {
  const uint32_t P = b.page_size;
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
    for (uint64_t q = p; q < na; ++q) {
      sha256_page_digest({q == 0 ? b.prior : oa + 32 * (q - 1), ta + q * P, P, b.bigram}, oa + 32 * q);
    }
    for (uint64_t q = p; q < nb; ++q) {
      sha256_page_digest({q == 0 ? b.prior : ob + 32 * (q - 1), tb + q * P, P, b.bigram}, ob + 32 * q);
    }
  }
  if (s < b.nseq) {
    sglang_chain_one(b.tokens + b.offsets[s], page_offsets[s + 1] - page_offsets[s], P, b.bigram,
                     b.prior, out + 32 * page_offsets[s],
                     [](const PageMessage& m, uint8_t* o) { sha256_page_digest(m, o); });
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

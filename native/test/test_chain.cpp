// The SGLang page chain: the batched, interleaved, zero-copy path against a plain streaming
// composition of the spec (hashing.md §1), on both backends.
#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "sglang_chain.h"
#include "sglang_namespace.h"
#include "sha256.h"

using namespace kv;

namespace {

// The spec written the slow, obvious way: digest[i] = SHA256(digest[i-1] || le32 tokens).
std::vector<Digest> reference_chain(const uint32_t* t, size_t n, uint32_t P, bool bigram, const uint8_t* prior) {
  std::vector<Digest> out;
  const size_t units = bigram ? (n ? n - 1 : 0) : n;
  for (size_t p = 0; p < units / P; ++p) {
    Sha256 h;
    if (p > 0) h.update(out.back().data(), 32);
    else if (prior) h.update(prior, 32);
    for (size_t u = p * P; u < (p + 1) * P; ++u) {
      uint8_t le[8];
      const uint32_t a = t[u], b = bigram ? t[u + 1] : 0;
      for (int k = 0; k < 4; ++k) le[k] = uint8_t(a >> (8 * k)), le[4 + k] = uint8_t(b >> (8 * k));
      h.update(le, bigram ? 8 : 4);
    }
    Digest d;
    h.final(d.data());
    out.push_back(d);
  }
  return out;
}

void check_batch(std::mt19937_64& rng, uint32_t P, bool bigram, bool with_prior) {
  const size_t nseq = 1 + rng() % 7;
  std::vector<uint64_t> offsets{0};
  std::vector<uint32_t> tokens;
  for (size_t s = 0; s < nseq; ++s) {
    const size_t len = rng() % (P * 5 + 3);
    for (size_t i = 0; i < len; ++i) {
      const uint64_t r = rng();
      tokens.push_back(r % 5 == 0 ? 0u : r % 5 == 1 ? 0xffffffffu : uint32_t(r));
    }
    offsets.push_back(tokens.size());
  }
  Digest prior;
  for (auto& b : prior) b = uint8_t(rng());
  ChainBatch b;
  b.tokens = tokens.data();
  b.offsets = offsets.data();
  b.nseq = nseq;
  b.page_size = P;
  b.bigram = bigram;
  b.prior = with_prior ? prior.data() : nullptr;
  std::vector<uint64_t> po(nseq + 1);
  const uint64_t pages = sglang_page_offsets(b, po.data());
  std::vector<uint8_t> out(pages * 32);
  sglang_chain_batch(b, po.data(), out.data());
  for (size_t s = 0; s < nseq; ++s) {
    auto ref = reference_chain(tokens.data() + offsets[s], offsets[s + 1] - offsets[s], P, bigram, b.prior);
    CHECK_EQ(ref.size(), size_t(po[s + 1] - po[s]));
    for (size_t p = 0; p < ref.size(); ++p) {
      CHECK(std::memcmp(ref[p].data(), out.data() + 32 * (po[s] + p), 32) == 0);
    }
  }
}

}  // namespace

TEST_CASE(chain, batch_matches_spec_all_backends) {
  const Sha256Backend saved = sha256_backend();
  std::mt19937_64 rng(7);
  for (auto be : {Sha256Backend::Portable, Sha256Backend::ShaNi}) {
    if (!sha256_set_backend(be)) continue;
    for (uint32_t P : {1u, 2u, 3u, 16u, 64u}) {
      for (int i = 0; i < 20; ++i) {
        check_batch(rng, P, false, false);
        check_batch(rng, P, true, false);
        check_batch(rng, P, false, true);
        check_batch(rng, P, true, true);
      }
    }
  }
  sha256_set_backend(saved);
}

TEST_CASE(chain, int64_and_hex) {
  // The int64 is the first 8 digest bytes big-endian, two's complement.
  uint8_t d[32] = {0xfe, 0xa7, 0xb3, 0x27, 0x78, 0xec, 0xbd, 0xd7};
  CHECK_EQ(digest_to_int64(d), int64_t(uint64_t(0xfea7b32778ecbdd7ull)));
  d[0] = 0x0c;
  CHECK(digest_to_int64(d) > 0);
  CHECK_EQ(digest_hex(d).substr(0, 16), std::string("0ca7b32778ecbdd7"));
}

TEST_CASE(chain, partial_pages_are_not_hashed) {
  std::vector<uint32_t> t(130);
  std::vector<uint64_t> off{0, 130};
  ChainBatch b;
  b.tokens = t.data();
  b.offsets = off.data();
  b.nseq = 1;
  b.page_size = 64;
  std::vector<uint64_t> po(2);
  CHECK_EQ(sglang_page_offsets(b, po.data()), uint64_t(2));
  b.bigram = true;  // 129 bigram units -> 2 full pages; 129 raw tokens -> 128 units -> 2
  CHECK_EQ(sglang_page_offsets(b, po.data()), uint64_t(2));
  off[1] = 128;
  CHECK_EQ(sglang_page_offsets(b, po.data()), uint64_t(1));
}

// SHA-256 with the x86 SHA extensions. Compiled for every x86-64 host through function target
// attributes (no special compiler flags); called only after CPUID says the CPU has them.
// The two-message variant interleaves independent chains: sha256rnds2 has a latency of several
// cycles but a throughput of one, so a single chain leaves the unit mostly idle.
#include "sha256.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <immintrin.h>

#define KV_SHANI_TARGET __attribute__((target("sha,sse4.1,ssse3")))

namespace kv {
namespace detail {
namespace {

alignas(16) const uint32_t kK[64] = {KV_SHA256_K_VALUES};

struct State {
  __m128i abef, cdgh;
};

KV_SHANI_TARGET inline State load_state(const uint32_t h[8]) {
  __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h));
  __m128i s1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 4));
  tmp = _mm_shuffle_epi32(tmp, 0xB1);  // CDAB
  s1 = _mm_shuffle_epi32(s1, 0x1B);    // EFGH
  return {_mm_alignr_epi8(tmp, s1, 8), _mm_blend_epi16(s1, tmp, 0xF0)};  // ABEF, CDGH
}

KV_SHANI_TARGET inline void store_state(const State& s, uint32_t h[8]) {
  __m128i tmp = _mm_shuffle_epi32(s.abef, 0x1B);  // FEBA
  __m128i s1 = _mm_shuffle_epi32(s.cdgh, 0xB1);   // DCHG
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h), _mm_blend_epi16(tmp, s1, 0xF0));      // DCBA
  _mm_storeu_si128(reinterpret_cast<__m128i*>(h + 4), _mm_alignr_epi8(s1, tmp, 8));     // ABEF
}

KV_SHANI_TARGET inline State initial_state() {
  uint32_t h[8];
  sha256_init(h);
  return load_state(h);
}

// Four rounds with message words w (already byte-swapped).
#define KV_QROUND(S, W, I)                                                                         \
  do {                                                                                             \
    __m128i m_ = _mm_add_epi32(W, _mm_load_si128(reinterpret_cast<const __m128i*>(kK + 4 * (I)))); \
    S.cdgh = _mm_sha256rnds2_epu32(S.cdgh, S.abef, m_);                                            \
    m_ = _mm_shuffle_epi32(m_, 0x0E);                                                              \
    S.abef = _mm_sha256rnds2_epu32(S.abef, S.cdgh, m_);                                            \
  } while (0)

// Message schedule: W[4i..4i+3] from the previous four groups (ring of 4).
#define KV_SCHED(W, I)                                                                                     \
  W[(I) & 3] = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(W[(I) & 3], W[((I) + 1) & 3]),      \
                                                  _mm_alignr_epi8(W[((I) + 3) & 3], W[((I) + 2) & 3], 4)), \
                                    W[((I) + 3) & 3])

KV_SHANI_TARGET inline void compress1(State& s, const uint8_t* blk) {
  const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  const State save = s;
  __m128i w[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * i)), mask);
    KV_QROUND(s, w[i], i);
  }
#pragma GCC unroll 12
  for (int i = 4; i < 16; ++i) {
    KV_SCHED(w, i);
    KV_QROUND(s, w[i & 3], i);
  }
  s.abef = _mm_add_epi32(s.abef, save.abef);
  s.cdgh = _mm_add_epi32(s.cdgh, save.cdgh);
}

KV_SHANI_TARGET inline void compress2(State& a, const uint8_t* ba, State& b, const uint8_t* bb) {
  const __m128i mask = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  const State sa = a, sb = b;
  __m128i wa[4], wb[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    wa[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ba + 16 * i)), mask);
    wb[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bb + 16 * i)), mask);
    KV_QROUND(a, wa[i], i);
    KV_QROUND(b, wb[i], i);
  }
#pragma GCC unroll 12
  for (int i = 4; i < 16; ++i) {
    KV_SCHED(wa, i);
    KV_SCHED(wb, i);
    KV_QROUND(a, wa[i & 3], i);
    KV_QROUND(b, wb[i & 3], i);
  }
  a.abef = _mm_add_epi32(a.abef, sa.abef);
  a.cdgh = _mm_add_epi32(a.cdgh, sa.cdgh);
  b.abef = _mm_add_epi32(b.abef, sb.abef);
  b.cdgh = _mm_add_epi32(b.cdgh, sb.cdgh);
}

KV_SHANI_TARGET inline void finish(const State& s, uint8_t out[32]) {
  uint32_t h[8];
  store_state(s, h);
  sha256_store_digest(h, out);
}

}  // namespace

bool shani_cpu_has() {
  static const bool has = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    return ssse3 && sse41 && (b & (1u << 29));
  }();
  return has;
}

KV_SHANI_TARGET void shani_compress(uint32_t h[8], const uint8_t* blocks, size_t nblocks) {
  State s = load_state(h);
  for (size_t i = 0; i < nblocks; ++i) compress1(s, blocks + 64 * i);
  store_state(s, h);
}

KV_SHANI_TARGET void shani_page_digest(const PageMessage& m, uint8_t out[32]) {
  State s = initial_state();
  alignas(16) uint8_t scratch[64];
  const uint64_t n = m.blocks();
  for (uint64_t i = 0; i < n; ++i) compress1(s, m.block(i, scratch));
  finish(s, out);
}

KV_SHANI_TARGET void shani_page_digest2(const PageMessage& ma, uint8_t* out_a, const PageMessage& mb, uint8_t* out_b) {
  State a = initial_state(), b = initial_state();
  alignas(16) uint8_t sa[64], sb[64];
  const uint64_t na = ma.blocks(), nb = mb.blocks(), both = na < nb ? na : nb;
  uint64_t i = 0;
  for (; i < both; ++i) compress2(a, ma.block(i, sa), b, mb.block(i, sb));
  for (uint64_t j = i; j < na; ++j) compress1(a, ma.block(j, sa));
  for (uint64_t j = i; j < nb; ++j) compress1(b, mb.block(j, sb));
  finish(a, out_a);
  finish(b, out_b);
}

}  // namespace detail
}  // namespace kv

#else  // not x86-64: the portable path is the only one

namespace kv {
namespace detail {
bool shani_cpu_has() {
  return false;
}
void shani_compress(uint32_t h[8], const uint8_t* blocks, size_t n) {
  for (size_t i = 0; i < n; ++i) sha256_compress_portable(h, blocks + 64 * i);
}
void shani_page_digest(const PageMessage& m, uint8_t out[32]) {
  page_digest_portable(m, out);
}
void shani_page_digest2(const PageMessage& a, uint8_t* oa, const PageMessage& b, uint8_t* ob) {
  page_digest_portable(a, oa);
  page_digest_portable(b, ob);
}
}  // namespace detail
}  // namespace kv
#endif

// AVX-512 VBMI path of int_runs.h, compiled for every x86-64 host through function target
// attributes and called only after the run-time check.
//
// A value's length follows from its first byte (fixint 1, uint8 2, uint16 3, uint32 5), but
// where the next value starts depends on every length before it. Per 64-byte window: next[i] =
// i + length(byte i) for every position i as if a value started there, and count[i] = 1 (or a
// poison value at a byte that is no uint32 form). Six doubling steps (next = next[next],
// count += count[next], positions past the window fixed with count 0) give, for every entry
// position, where the chain leaves the window and how many values it crossed, poison included.
// The carry from one window to the next is then one byte read; the doubling does not depend
// on it, so windows overlap in the pipeline.
#include "int_runs.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define KV_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi")))

namespace kv::mp::detail {
namespace {

constexpr uint8_t kPoison = 0x80;  // any sum holding one stays >= 0x80 (saturating adds)

alignas(64) constexpr uint8_t kIota[64] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                           16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                           32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                                           48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

struct Step {
  __m512i next, count;
};

// next[i] and count[i] for one step from every position of the window at `w`.
KV_AVX512_TARGET inline Step first_step(const uint8_t* w) {
  const __m512i v = _mm512_loadu_si512(w);
  const __mmask64 fix = ~_mm512_movepi8_mask(v);  // 0x00..0x7f
  const __mmask64 u8 = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(static_cast<char>(0xcc)));
  const __mmask64 u16 = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(static_cast<char>(0xcd)));
  const __mmask64 u32 = _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8(static_cast<char>(0xce)));
  __m512i len = _mm512_set1_epi8(1);
  len = _mm512_mask_mov_epi8(len, u8, _mm512_set1_epi8(2));
  len = _mm512_mask_mov_epi8(len, u16, _mm512_set1_epi8(3));
  len = _mm512_mask_mov_epi8(len, u32, _mm512_set1_epi8(5));
  const __m512i count =
      _mm512_mask_mov_epi8(_mm512_set1_epi8(static_cast<char>(kPoison)), fix | u8 | u16 | u32, _mm512_set1_epi8(1));
  return {_mm512_add_epi8(_mm512_load_si512(kIota), len), count};
}

// Two steps of `s` as one: positions 64..127 (past the window) map to themselves with count 0.
KV_AVX512_TARGET inline Step twice(const Step& s, __m512i past) {
  const __m512i zero = _mm512_setzero_si512();
  return {_mm512_permutex2var_epi8(s.next, s.next, past),
          _mm512_adds_epu8(s.count, _mm512_permutex2var_epi8(s.count, s.next, zero))};
}

}  // namespace

KV_AVX512_TARGET uint32_t skip_u32_forms_avx512(const uint8_t*& p, const uint8_t* end, uint32_t n) {
  const __m512i past = _mm512_add_epi8(_mm512_load_si512(kIota), _mm512_set1_epi8(64));
  const uint8_t* w = p;  // window start
  uint32_t at = 0;       // entry position in the window (a value never spans more than 5 bytes)
  uint32_t done = 0;
  alignas(64) uint8_t next[6][64], count[6][64];
  // 72 bytes: a value that starts in the window ends at most 5 bytes past it, inside the buffer.
  while (done < n && end - w >= 72) {
    const Step first = first_step(w);
    Step s = first;
    for (int k = 0; k < 6; ++k) s = twice(s, past);  // 64 steps: every chain has left the window
    _mm512_store_si512(next[0], s.next);
    _mm512_store_si512(count[0], s.count);
    const uint32_t c = count[0][at];
    if (c < kPoison && done + c < n) {  // the run goes on past this window, every value good
      done += c;
      at = next[0][at] - 64;
      w += 64;
      continue;
    }
    // The run ends in this window, or a value of another form lies on the chain (maybe past the
    // run's end, in the fields that follow): take the longest good prefix, up to the values left,
    // 2^k values at a time from the largest k.
    s = first;
    for (int k = 0; k < 6; ++k) {
      _mm512_store_si512(next[k], s.next);
      _mm512_store_si512(count[k], s.count);
      if (k < 5) s = twice(s, past);
    }
    const uint32_t left = n - done;
    uint32_t pos = at, taken = 0;
    for (int k = 5; k >= 0; --k) {
      const uint32_t step = 1u << k;
      if (pos < 64 && taken + step <= left && count[k][pos] == step) {
        taken += step;
        pos = next[k][pos];
      }
    }
    p = w + pos;
    return done + taken;
  }
  p = w + at;
  return done;
}

}  // namespace kv::mp::detail

#else  // not x86-64 with GCC/Clang: never selected (int_runs_avx512_supported() is false)

namespace kv::mp::detail {
uint32_t skip_u32_forms_avx512(const uint8_t*&, const uint8_t*, uint32_t) {
  return 0;
}
}  // namespace kv::mp::detail

#endif

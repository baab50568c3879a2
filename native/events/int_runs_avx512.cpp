// AVX-512 VBMI path of int_runs.h, compiled for every x86-64 host through function target
// attributes and called only after the run-time check.
//
// A value's length follows from its first byte (fixint 1, uint8 2, uint16 3, uint32 5), but
// where the next value starts depends on every length before it. Per 64-byte window: next[i] =
// i + length(byte i) for every position i as if a value started there (a table lookup on the
// byte), and count[i] = 1 (or a poison value at a byte that is no uint32 form, whose length 0
// keeps the chain there). Doubling steps (next = next[next], count += count[next], positions past
// the window kept with count 0) give, for every entry position, where the chain leaves the
// window and how many values it crossed, poison included. Values of 3 or 5 bytes, token ids,
// fill a window with at most 22, so five steps (32 values) usually carry the chain out of it;
// a chain still inside takes the exact path, which steps six times. The carry from one window
// to the next is one permute, kept in a vector register; the doubling does not depend on it, so
// windows overlap in the pipeline, as far as the scheduler holds them: the chain of latencies
// within a window is what limits the rate, so the steps use the two-table permute (positions
// past the window read from a second table), with no mask to compute on that chain.
#include <algorithm>

#include "int_runs.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC's AVX-512 intrinsics fill unused result lanes from _mm512_undefined_*(), which
// -Wmaybe-uninitialized reports at low optimisation levels (the sanitizer build).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#define KV_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vbmi")))

namespace kv::mp::detail {
namespace {

constexpr uint8_t kPoison = 0x80;  // any sum holding one stays >= 0x80 (saturating adds)
constexpr uint8_t P = kPoison;

alignas(64) constexpr uint8_t kIota[64] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15,
                                           16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31,
                                           32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47,
                                           48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

// Lengths of the forms with a first byte >= 0x80, indexed by the byte's low seven bits: uint8
// (0xcc) 2, uint16 (0xcd) 3, uint32 (0xce) 5, anything else 0.
alignas(64) constexpr uint8_t kLengthHigh[128] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

// The count of one step from such a byte: 1 for those three forms, poison for the rest.
alignas(64) constexpr uint8_t kCountHigh[128] = {
    P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P,
    P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P,
    P, P, P, P, P, P, P, P, P, P, P, P, 1, 1, 1, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P,
    P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P};

struct Step {
  __m512i next, count;
};

// next[i] and count[i] for one step from every position of the window `v`. The length and the
// count are looked up side by side (not the count from the length), which keeps the count's
// chain of latencies, the longer one, short.
KV_AVX512_TARGET inline Step first_step(__m512i v) {
  const __mmask64 fix = ~_mm512_movepi8_mask(v);  // 0x00..0x7f
  const __m512i len = _mm512_mask_mov_epi8(
      _mm512_permutex2var_epi8(_mm512_load_si512(kLengthHigh), v, _mm512_load_si512(kLengthHigh + 64)), fix,
      _mm512_set1_epi8(1));
  const __m512i count = _mm512_mask_mov_epi8(
      _mm512_permutex2var_epi8(_mm512_load_si512(kCountHigh), v, _mm512_load_si512(kCountHigh + 64)), fix,
      _mm512_set1_epi8(1));
  return {_mm512_add_epi8(_mm512_load_si512(kIota), len), count};
}

// Two steps of `s` as one; positions 64..127 (past the window) stay, with count 0. The
// two-table permute reads them from `past` (64..127 mapped to themselves) and zero, so no mask
// sits on the chain of latencies.
KV_AVX512_TARGET inline Step twice(const Step& s, __m512i past) {
  return {_mm512_permutex2var_epi8(s.next, s.next, past),
          _mm512_adds_epu8(s.count, _mm512_permutex2var_epi8(s.count, s.next, _mm512_setzero_si512()))};
}

KV_AVX512_TARGET inline uint32_t lane0(__m512i x) {
  return static_cast<uint8_t>(_mm_cvtsi128_si32(_mm512_castsi512_si128(x)));
}

// Fast-path verdict of a window whose five doubled steps are `s`, entered at `at` (every lane):
// the values crossed, or 0 when the chain is still inside (more than 32 values, or poisoned:
// the exact path decides).
KV_AVX512_TARGET inline uint32_t crossed(const Step& s, __m512i at, __m512i& exit) {
  exit = _mm512_permutexvar_epi8(at, s.next);
  const uint32_t c = lane0(_mm512_permutexvar_epi8(at, s.count));
  return c < kPoison && lane0(exit) >= 64 ? c : 0;
}

}  // namespace

KV_AVX512_TARGET uint32_t skip_u32_forms_avx512(const uint8_t*& p, const uint8_t* end, uint32_t n) {
  const __m512i sixty4 = _mm512_set1_epi8(64);
  const __m512i past = _mm512_add_epi8(_mm512_load_si512(kIota), sixty4);
  const uint8_t* w = p;                // window start
  __m512i at = _mm512_setzero_si512();  // entry position in the window, every lane
  uint32_t done = 0;
  alignas(64) uint8_t next[6][64], count[6][64];
  // 72 bytes: a value that starts in the window ends at most 5 bytes past it, inside the buffer.
  while (done < n && end - w >= 72) {
    const Step first = first_step(_mm512_loadu_si512(w));
    Step s = first;
    for (int k = 0; k < 5; ++k) s = twice(s, past);
    __m512i exit;
    const uint32_t c = crossed(s, at, exit);
    if (c != 0 && done + c < n) {  // the run goes on past this window, every value good
      done += c;
      at = _mm512_sub_epi8(exit, sixty4);
      w += 64;
      continue;
    }
    // The run ends in this window, or a value of another form lies on the chain (maybe past the
    // run's end, in the fields that follow), or it holds more than 32 values: take the longest
    // good prefix, up to the values left, 2^k values at a time from the largest k.
    s = first;
    for (int k = 0; k < 6; ++k) {
      _mm512_store_si512(next[k], s.next);
      _mm512_store_si512(count[k], s.count);
      if (k < 5) s = twice(s, past);
    }
    const uint32_t left = n - done;
    uint32_t pos = lane0(at), taken = 0;
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
  p = w + lane0(at);
  return done;
}

// Decoding: the window's chain of values is followed as for skipping (the carry to the next
// window needs only the doubled steps, not the values). Position k of the chain is the entry
// plus 2^j steps for each bit j of k: five masked permutes give the first 32 lanes, six all 64.
// Each value's bytes are then gathered from the window (and the next 64 bytes, where a value
// straddles) and shifted into place, 16 values at a time.
namespace {

struct Chain {
  __m512i pos, tags;  // lane k: where the k-th value from the entry starts, and its first byte
};

template <int Levels>
KV_AVX512_TARGET inline Chain chain_from(__m512i at, const __m512i (&levels)[6], __m512i v, __m512i v2, __m512i past) {
  static constexpr __mmask64 kBit[6] = {0xaaaaaaaaaaaaaaaaULL, 0xccccccccccccccccULL, 0xf0f0f0f0f0f0f0f0ULL,
                                        0xff00ff00ff00ff00ULL, 0xffff0000ffff0000ULL, 0xffffffff00000000ULL};
  __m512i pos = at;
  for (int k = 0; k < Levels; ++k) pos = _mm512_mask2_permutex2var_epi8(levels[k], pos, kBit[k], past);
  return {pos, _mm512_permutex2var_epi8(v, pos, v2)};
}

// Values `first` .. `first + count - 1` of the chain (count <= 16) into out.
KV_AVX512_TARGET inline void values(const Chain& c, uint32_t first, uint32_t count, __m512i v, __m512i v2,
                                    uint32_t* out) {
  alignas(64) static constexpr uint8_t kQuads[64] = {0,  0,  0,  0,  1,  1,  1,  1,  2,  2,  2,  2,  3,  3,  3,  3,
                                                     4,  4,  4,  4,  5,  5,  5,  5,  6,  6,  6,  6,  7,  7,  7,  7,
                                                     8,  8,  8,  8,  9,  9,  9,  9,  10, 10, 10, 10, 11, 11, 11, 11,
                                                     12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15};
  const __m512i base = _mm512_set1_epi8(static_cast<char>(first));
  const __m512i at4 = _mm512_permutexvar_epi8(_mm512_add_epi8(_mm512_load_si512(kQuads), base), c.pos);
  // Byte k of a value's word takes payload byte 4 - k (big-endian payload, little-endian word).
  const __m512i bytes = _mm512_permutex2var_epi8(v, _mm512_add_epi8(at4, _mm512_set1_epi32(0x01020304)), v2);
  const __m512i tag = _mm512_cvtepu8_epi32(
      _mm512_castsi512_si128(_mm512_permutexvar_epi8(_mm512_add_epi8(_mm512_load_si512(kIota), base), c.tags)));
  // Then shifted down by form: a uint8 keeps its top byte, a uint16 two, a uint32 all four.
  const __m512i shifts = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 24);
  __m512i val =
      _mm512_srlv_epi32(bytes, _mm512_permutexvar_epi32(_mm512_sub_epi32(tag, _mm512_set1_epi32(0xcc)), shifts));
  val = _mm512_mask_mov_epi32(val, _mm512_cmplt_epu32_mask(tag, _mm512_set1_epi32(0x80)), tag);  // fixint
  if (count >= 16) _mm512_storeu_si512(out, val);
  else _mm512_mask_storeu_epi32(out, __mmask16((1u << count) - 1), val);
}

}  // namespace

KV_AVX512_TARGET uint32_t decode_u32_forms_avx512(const uint8_t*& p, const uint8_t* end, uint32_t n, uint32_t* out) {
  const __m512i sixty4 = _mm512_set1_epi8(64);
  const __m512i past = _mm512_add_epi8(_mm512_load_si512(kIota), sixty4);
  const uint8_t* w = p;
  __m512i at = _mm512_setzero_si512();  // entry position in the window, every lane
  uint32_t done = 0;
  // 128 bytes: a value starting in the window is gathered from it and the next 64 bytes.
  while (done < n && end - w >= 128) {
    const __m512i v = _mm512_loadu_si512(w), v2 = _mm512_loadu_si512(w + 64);
    __m512i levels[6];
    Step s = first_step(v);
    for (int k = 0; k < 5; ++k) {
      levels[k] = s.next;
      s = twice(s, past);
    }
    __m512i exit;
    const uint32_t c = crossed(s, at, exit);
    if (c != 0 && done + c < n) {  // the run goes on past this window
      const Chain ch = chain_from<5>(at, levels, v, v2, past);
      // Both halves, always: a branch on c > 16 would be a coin toss for token ids. Lanes past
      // c are written, and overwritten by the next window, where the output has room.
      if (done + 32 <= n) {
        values(ch, 0, 16, v, v2, out + done);
        values(ch, 16, 16, v, v2, out + done + 16);
      } else {
        values(ch, 0, c, v, v2, out + done);
        if (c > 16) values(ch, 16, c - 16, v, v2, out + done + 16);
      }
      done += c;
      at = _mm512_sub_epi8(exit, sixty4);
      w += 64;
      continue;
    }
    // The run ends here, or a value of another form lies on the chain, or there are more than
    // 32 values: the values up to the first of another form, at most 63 (the position after
    // the last is then a lane), at most those left.
    levels[5] = s.next;
    const Chain ch = chain_from<6>(at, levels, v, v2, past);
    const __mmask64 inside = _mm512_cmplt_epu8_mask(ch.pos, sixty4);
    const __mmask64 good = ~_mm512_movepi8_mask(ch.tags) |
                           _mm512_cmpeq_epi8_mask(ch.tags, _mm512_set1_epi8(static_cast<char>(0xcc))) |
                           _mm512_cmpeq_epi8_mask(ch.tags, _mm512_set1_epi8(static_cast<char>(0xcd))) |
                           _mm512_cmpeq_epi8_mask(ch.tags, _mm512_set1_epi8(static_cast<char>(0xce)));
    const uint64_t run = inside & good;  // all 64 lanes: 64 values of one byte
    const uint32_t take =
        std::min<uint32_t>(run == ~uint64_t(0) ? 63 : std::min<uint32_t>(__builtin_ctzll(~run), 63), n - done);
    for (uint32_t g = 0; 16 * g < take; ++g) values(ch, 16 * g, take - 16 * g, v, v2, out + done + 16 * g);
    alignas(64) uint8_t pos[64];
    _mm512_store_si512(pos, ch.pos);
    p = w + pos[take];
    return done + take;
  }
  p = w + lane0(at);
  return done;
}

}  // namespace kv::mp::detail

#else  // not x86-64 with GCC/Clang: never selected (int_runs_avx512_supported() is false)

namespace kv::mp::detail {
uint32_t skip_u32_forms_avx512(const uint8_t*&, const uint8_t*, uint32_t) {
  return 0;
}
uint32_t decode_u32_forms_avx512(const uint8_t*&, const uint8_t*, uint32_t, uint32_t*) {
  return 0;
}
}  // namespace kv::mp::detail

#endif

// AVX2 path of int_runs.h, for x86-64 hosts without AVX-512 VBMI, compiled through
// function target attributes and called only after the run-time check.
//
// The idea is the AVX-512 path's (int_runs_avx512.cpp), cut to what AVX2's in-lane byte shuffle
// reaches: 16-byte windows, two to a register. Per window: next[i] = i + length(byte i) for every
// position i as if a value started there, with positions past the window (16..20) written as
// 0x80 | (position - 16) (bit 7 marks them); a byte of no uint32 form has length 0, which keeps
// the chain there. Three doubling steps (next = next[next], count += count[next] from count 1;
// pshufb reads 0 for an index with bit 7 set, so positions past the window keep their count,
// and an unsigned max keeps their value: a step never leads backwards, and 0 is below every
// position) give, for every entry position, where eight values lead and how many were crossed.
// A chain that left the window (bit 7) crossed only values of the four forms; one that did not
// holds more than eight values or a byte of another form. Values of 3 or 5 bytes, token ids,
// fill a window with at most 6, so the chain has left it. The carry from one window to the next
// is one shuffle and one AND in a register, four windows per step of the loop; the windows'
// doubling does not depend on it, so they overlap in the pipeline. A window whose chain has not
// left it, or where the run ends, is stepped one value at a time.
#include <cstddef>

#include "int_runs.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define KV_AVX2_TARGET __attribute__((target("avx2")))

namespace kv::mp::detail {
namespace {

// Length of the uint32 form whose first byte is b, 0 for any other form.
inline uint32_t length_of(uint8_t b) {
  if (b < 0x80) return 1;
  switch (b) {
    case 0xcc:
      return 2;
    case 0xcd:
      return 3;
    case 0xce:
      return 5;
    default:
      return 0;
  }
}

struct Windows {
  __m256i next, count;  // two 16-byte windows, after eight steps
  __m256i step[3];      // where 1, 2 and 4 steps lead (for decoding)
};

KV_AVX2_TARGET inline Windows windows(const uint8_t* w) {
  // Positions biased by 0x70: a position past the window (16..20) comes out as 0x80..0x84, one
  // inside as 0x70 | position, whose bits 4..6 pshufb ignores.
  const __m256i biased =
      _mm256_setr_epi8(0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f,
                       0x70, 0x71, 0x72, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7c, 0x7d, 0x7e, 0x7f);
  // Indexed by byte - 0xcc (clamped to 15): uint8, uint16, uint32, then the rest.
  const __m256i length_high =
      _mm256_setr_epi8(2, 3, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 3, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m256i ones = _mm256_set1_epi8(1), fifteen = _mm256_set1_epi8(15);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i t = _mm256_min_epu8(_mm256_sub_epi8(v, _mm256_set1_epi8(static_cast<char>(0xcc))), fifteen);
  // A byte below 0x80 (bit 7 clear) is a positive fixint: length 1.
  const __m256i len = _mm256_blendv_epi8(ones, _mm256_shuffle_epi8(length_high, t), v);
  __m256i count = ones;
  Windows r;
  __m256i next = _mm256_add_epi8(biased, len);
  for (int k = 0; k < 3; ++k) {
    r.step[k] = next;
    const __m256i further = _mm256_shuffle_epi8(next, next);
    count = _mm256_add_epi8(count, _mm256_shuffle_epi8(count, next));
    next = _mm256_max_epu8(further, next);
  }
  r.next = next;
  r.count = count;
  return r;
}

KV_AVX2_TARGET inline __m128i low(__m256i x) {
  return _mm256_castsi256_si128(x);
}
KV_AVX2_TARGET inline __m128i high(__m256i x) {
  return _mm256_extracti128_si256(x, 1);
}

KV_AVX2_TARGET inline uint32_t lane0(__m128i x) {
  return static_cast<uint8_t>(_mm_cvtsi128_si32(x));
}

// Four windows (64 bytes from w) and the chain through them from `at`: window h is entered at
// entry[h] (every lane), its chain leaves it at exit[h] (bit 7 set when it did, low bits the
// entry into the next window) after crossed[h] values (lane 0; only when it left).
struct Block {
  Windows a, b;
  __m128i entry[4], exit[4], crossed[4];
  uint32_t total;  // values crossed in all four (when every chain left its window)
  bool left;       // every window's chain left it

  KV_AVX2_TARGET __m128i step(int h, int k) const {
    return (h & 1) ? high((h < 2 ? a : b).step[k]) : low((h < 2 ? a : b).step[k]);
  }
};

KV_AVX2_TARGET inline void chain(const uint8_t* w, __m128i at, Block& k) {
  const __m128i low7 = _mm_set1_epi8(0x7f);
  k.a = windows(w);
  k.b = windows(w + 32);
  const __m128i next[4] = {low(k.a.next), high(k.a.next), low(k.b.next), high(k.b.next)};
  const __m128i count[4] = {low(k.a.count), high(k.a.count), low(k.b.count), high(k.b.count)};
  k.entry[0] = at;
  for (int h = 0; h < 4; ++h) {
    k.exit[h] = _mm_shuffle_epi8(next[h], k.entry[h]);
    k.crossed[h] = _mm_shuffle_epi8(count[h], k.entry[h]);
    if (h < 3) k.entry[h + 1] = _mm_and_si128(k.exit[h], low7);
  }
  k.total = lane0(_mm_add_epi8(_mm_add_epi8(k.crossed[0], k.crossed[1]), _mm_add_epi8(k.crossed[2], k.crossed[3])));
  k.left = lane0(_mm_and_si128(_mm_and_si128(k.exit[0], k.exit[1]), _mm_and_si128(k.exit[2], k.exit[3]))) >> 7;
}

// The value of uint32 form whose first byte is at q and whose length is len (length_of).
inline uint32_t value_at(const uint8_t* q, uint32_t len) {
  switch (len) {
    case 1:
      return q[0];
    case 2:
      return q[1];
    case 3:
      return uint32_t(q[1]) << 8 | q[2];
    default:
      return uint32_t(q[1]) << 24 | uint32_t(q[2]) << 16 | uint32_t(q[3]) << 8 | q[4];
  }
}

// The first eight values of window h's chain (valid up to its count), into out[0 .. room - 1]
// (room <= 8 lanes written). Lane i's position is the entry plus 2^j steps for each bit j of i;
// each value's four bytes after its first are gathered from the window and the 16 after it (a
// value may straddle), reversed into a word and shifted down by form.
KV_AVX2_TARGET inline void emit(const Block& k, int h, const uint8_t* w, uint32_t room, uint32_t* out) {
  constexpr char X = static_cast<char>(0x80);
  const __m128i bit[3] = {_mm_setr_epi8(0, X, 0, X, 0, X, 0, X, 0, 0, 0, 0, 0, 0, 0, 0),
                          _mm_setr_epi8(0, 0, X, X, 0, 0, X, X, 0, 0, 0, 0, 0, 0, 0, 0),
                          _mm_setr_epi8(0, 0, 0, 0, X, X, X, X, 0, 0, 0, 0, 0, 0, 0, 0)};
  __m128i pos = k.entry[h];
  for (int j = 0; j < 3; ++j) pos = _mm_blendv_epi8(pos, _mm_shuffle_epi8(k.step(h, j), pos), bit[j]);
  pos = _mm_and_si128(pos, _mm_set1_epi8(0x0f));
  // Lane i's four bytes: position i, in both halves (values 0..3 low, 4..7 high).
  const __m256i at = _mm256_shuffle_epi8(
      _mm256_broadcastq_epi64(pos),
      _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7));
  const uint8_t* base = w + 16 * h;
  const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base)));
  const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + 16)));
  // Byte j of a value's word is payload byte 4 - j (big-endian payload, little-endian word);
  // positions 16.. read the next 16 bytes (bit 4 of the index, moved to bit 7, picks them).
  const __m256i idx = _mm256_add_epi8(at, _mm256_set1_epi32(0x01020304));
  const __m256i bytes =
      _mm256_blendv_epi8(_mm256_shuffle_epi8(lo, idx), _mm256_shuffle_epi8(hi, idx), _mm256_slli_epi16(idx, 3));
  const __m256i tag = _mm256_and_si256(_mm256_shuffle_epi8(lo, at), _mm256_set1_epi32(0xff));
  // uint8 keeps the word's top byte, uint16 two, uint32 all four (index tag - 0xcc: 0, 1, 2).
  const __m256i shift = _mm256_permutevar8x32_epi32(_mm256_setr_epi32(24, 16, 0, 0, 0, 0, 0, 0),
                                                    _mm256_sub_epi32(tag, _mm256_set1_epi32(0xcc)));
  __m256i val = _mm256_srlv_epi32(bytes, shift);
  val = _mm256_blendv_epi8(val, tag, _mm256_cmpgt_epi32(_mm256_set1_epi32(0x80), tag));  // fixint: the tag itself
  if (room >= 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), val);
  } else {
    const __m256i lanes =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(room)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_epi32(reinterpret_cast<int*>(out), lanes, val);
  }
}

// Skipping (Read false) and decoding (Read true) walk the same chain: window by window, whole
// (all four at once when they all are) while its chain leaves it and values remain past it, its
// values read where the chain put them (emit); else one value at a time, and on to the next
// four windows from where the last value ends.
template <bool Read>
KV_AVX2_TARGET inline uint32_t walk(const uint8_t*& p, const uint8_t* end, uint32_t n, uint32_t* out) {
  // A value that starts in the 64 bytes ends at most 5 bytes past them; reading gathers the last
  // window's values from it and the 16 bytes after it.
  constexpr ptrdiff_t kFits = Read ? 80 : 69;
  const __m128i low7 = _mm_set1_epi8(0x7f);
  const uint8_t* w = p;             // four windows from here
  __m128i at = _mm_setzero_si128();  // entry position in the first window, every lane
  uint32_t done = 0;
  while (done < n && end - w >= kFits) {
    Block k;
    chain(w, at, k);
    int h = 0;
    if (k.left && done + k.total < n) {  // every chain left its window (every value good), more to come
      if constexpr (Read) {
        for (; h < 4; ++h) {
          emit(k, h, w, n - done, out + done);  // lanes past the window's values: overwritten by the next
          done += lane0(k.crossed[h]);
        }
      } else {
        done += k.total;
        h = 4;
      }
    }
    for (; h < 4; ++h) {
      const uint32_t ch = lane0(k.crossed[h]);
      if ((lane0(k.exit[h]) & 0x80) && done + ch < n) {
        if constexpr (Read) emit(k, h, w, n - done, out + done);
        done += ch;
        continue;
      }
      const uint8_t* q = w + 16 * h + lane0(k.entry[h]);
      const uint8_t* stop = w + 16 * h + 16;
      while (q < stop && done < n) {
        const uint32_t len = length_of(*q);
        if (len == 0) break;
        if constexpr (Read) out[done] = value_at(q, len);
        ++done;
        q += len;
      }
      if (q < stop || done == n) {  // another form, or the run's end
        p = q;
        return done;
      }
      // More than eight values in this window: go on from where the last one ends.
      w = stop;
      at = _mm_set1_epi8(static_cast<char>(q - stop));
      break;
    }
    if (h == 4) {  // every window whole
      w += 64;
      at = _mm_and_si128(k.exit[3], low7);
    }
  }
  p = w + lane0(at);
  return done;
}

}  // namespace

KV_AVX2_TARGET uint32_t skip_u32_forms_avx2(const uint8_t*& p, const uint8_t* end, uint32_t n) {
  return walk<false>(p, end, n, nullptr);
}

KV_AVX2_TARGET uint32_t decode_u32_forms_avx2(const uint8_t*& p, const uint8_t* end, uint32_t n, uint32_t* out) {
  return walk<true>(p, end, n, out);
}

}  // namespace kv::mp::detail

#else  // not x86-64 with GCC/Clang: never selected (int_runs_avx2_supported() is false)

namespace kv::mp::detail {
uint32_t skip_u32_forms_avx2(const uint8_t*&, const uint8_t*, uint32_t) {
  return 0;
}
uint32_t decode_u32_forms_avx2(const uint8_t*&, const uint8_t*, uint32_t, uint32_t*) {
  return 0;
}
}  // namespace kv::mp::detail

#endif

// A small, zero-copy, bounds-checked msgpack reader for KV-event payloads. Nothing is allocated:
// strings are views into the payload, and every length read from the wire (array, map, str, bin,
// ext) is checked against the bytes that remain before anything trusts it. An array header
// claiming more elements than bytes remain (each element takes at least one byte) is refused at
// the header, so a 5-byte "array of 4 billion" is an error, never an allocation.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace kv::mp {

enum class Type : uint8_t { Nil, Bool, UInt, Int, Float, Str, Bin, Array, Map, Ext, Invalid };

const char* type_name(Type t);

namespace detail {

constexpr Type type_of_byte(int b) {
  if (b <= 0x7f) return Type::UInt;
  if (b <= 0x8f) return Type::Map;
  if (b <= 0x9f) return Type::Array;
  if (b <= 0xbf) return Type::Str;
  if (b >= 0xe0) return Type::Int;
  switch (b) {
    case 0xc0:
      return Type::Nil;
    case 0xc2:
    case 0xc3:
      return Type::Bool;
    case 0xc4:
    case 0xc5:
    case 0xc6:
      return Type::Bin;
    case 0xc7:
    case 0xc8:
    case 0xc9:
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
      return Type::Ext;
    case 0xca:
    case 0xcb:
      return Type::Float;
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
      return Type::UInt;
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3:
      return Type::Int;
    case 0xd9:
    case 0xda:
    case 0xdb:
      return Type::Str;
    case 0xdc:
    case 0xdd:
      return Type::Array;
    case 0xde:
    case 0xdf:
      return Type::Map;
    default:
      return Type::Invalid;  // 0xc1
  }
}

struct TypeTable {
  Type of[256];
  constexpr TypeTable() : of() {
    for (int b = 0; b < 256; ++b) of[b] = type_of_byte(b);
  }
};
inline constexpr TypeTable kTypes;

}  // namespace detail

// Why a read failed; the reader stops at the first failure and stays failed.
enum class Fail : uint8_t { None, Truncated, BadByte, TooDeep, Length };

// The failure as an error message ("msgpack: truncated payload", ...).
const char* failure_text(Fail f);

class Reader {
 public:
  Reader() = default;
  Reader(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}

  bool ok() const { return fail_ == Fail::None; }
  Fail failure() const { return fail_; }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* pos() const { return p_; }
  bool at_end() const { return p_ == end_; }

  // Type of the next value without consuming it (Invalid at the end or on 0xc1).
  Type peek() const { return p_ < end_ ? detail::kTypes.of[*p_] : Type::Invalid; }

  bool read_nil();
  // Any integer that fits int64 (uint64 above INT64_MAX fails: use read_hash for hashes).
  bool read_int(int64_t& v);
  // A 64-bit hash: uint64 is reinterpreted as two's complement, int64 kept.
  bool read_hash(int64_t& v) {
    // uint64 / int64 (how engines write hashes) inline; every other form out of line.
    if (remaining() >= 9 && (*p_ == 0xcf || *p_ == 0xd3)) {
      uint64_t u;
      std::memcpy(&u, p_ + 1, 8);
      v = static_cast<int64_t>(__builtin_bswap64(u));
      p_ += 9;
      return true;
    }
    return read_hash_slow(v);
  }
  bool read_uint32(uint32_t& v);
  bool read_number(double& v);  // float or integer
  bool read_str(std::string_view& s) {
    if (p_ < end_ && (*p_ & 0xe0) == 0xa0 && size_t(*p_ & 0x1f) < remaining()) {  // fixstr (keys, tags)
      s = std::string_view(reinterpret_cast<const char*>(p_ + 1), *p_ & 0x1f);
      p_ += 1 + s.size();
      return true;
    }
    return read_str_slow(s);
  }
  bool read_bin(std::string_view& s);
  // Element count of an array / pair count of a map, checked against the bytes that remain.
  bool read_array(uint32_t& n);
  bool read_map(uint32_t& n);
  // Checks the next n values are integers in uint32 range and steps over them; on the first
  // that is not, stops there with `bad` = its position (the reader stays usable).
  bool skip_uint32s(uint32_t n, uint32_t& bad);
  // Reads n integers known (from skip_uint32s) to be uint32 into out.
  void read_checked_uint32s(uint32_t n, uint32_t* out);
  // skip_uint32s and read_checked_uint32s in one pass: checks and reads n integers in uint32
  // range into out (out[0..bad) are read when it stops at `bad`).
  bool read_uint32s(uint32_t n, uint32_t* out, uint32_t& bad);
  // Skips one whole value (nested to at most `max_depth` levels).
  bool skip(int max_depth = 32) {
    // One-byte values and short strings (most event fields) inline; the rest out of line.
    if (p_ < end_) {
      const uint8_t b = *p_;
      if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        ++p_;
        return true;
      }
      if ((b & 0xe0) == 0xa0 && size_t(b & 0x1f) < remaining()) {
        p_ += 1 + (b & 0x1f);
        return true;
      }
      if ((b == 0xcf || b == 0xd3) && remaining() >= 9) {  // 64-bit hashes
        p_ += 9;
        return true;
      }
    }
    return skip_slow(max_depth);
  }

  // Steps over `bytes` when the payload continues with exactly them (false, not moved, if not).
  bool consume(std::string_view bytes) {
    if (remaining() < bytes.size() || std::memcmp(p_, bytes.data(), bytes.size()) != 0) return false;
    p_ += bytes.size();
    return true;
  }

  // A sub-reader over exactly the next value, which this reader skips.
  bool take(Reader& value, int max_depth = 32) {
    const uint8_t* start = p_;
    if (!skip(max_depth)) return false;
    value = Reader(start, static_cast<size_t>(p_ - start));
    return true;
  }

 private:
  bool need(size_t n) {
    if (remaining() < n) return fail(Fail::Truncated);
    return true;
  }
  bool fail(Fail f) {
    if (fail_ == Fail::None) fail_ = f;
    p_ = end_;
    return false;
  }
  uint64_t be(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | p_[i];
    p_ += n;
    return v;
  }
  bool read_len_prefixed(uint8_t b, std::string_view& s, bool str);
  bool read_hash_slow(int64_t& v);
  bool read_str_slow(std::string_view& s);
  bool skip_slow(int max_depth);

  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  Fail fail_ = Fail::None;
};

}  // namespace kv::mp

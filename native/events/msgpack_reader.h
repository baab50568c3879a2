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

// Why a read failed; the reader stops at the first failure and stays failed.
enum class Fail : uint8_t { None, Truncated, BadByte, TooDeep, Length };

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
  Type peek() const;

  bool read_nil();
  // Any integer that fits int64 (uint64 above INT64_MAX fails: use read_hash for hashes).
  bool read_int(int64_t& v);
  // A 64-bit hash: uint64 is reinterpreted as two's complement, int64 kept.
  bool read_hash(int64_t& v);
  bool read_uint32(uint32_t& v);
  bool read_number(double& v);  // float or integer
  bool read_str(std::string_view& s);
  bool read_bin(std::string_view& s);
  // Element count of an array / pair count of a map, checked against the bytes that remain.
  bool read_array(uint32_t& n);
  bool read_map(uint32_t& n);
  // Checks the next n values are integers in uint32 range and steps over them; on the first
  // that is not, stops there with `bad` = its position (the reader stays usable).
  bool skip_uint32s(uint32_t n, uint32_t& bad);
  // Reads n integers known (from skip_uint32s) to be uint32 into out.
  void read_checked_uint32s(uint32_t n, uint32_t* out);
  // Skips one whole value (nested to at most `max_depth` levels).
  bool skip(int max_depth = 32);

  // A sub-reader over exactly the next value, which this reader skips.
  bool take(Reader& value, int max_depth = 32);

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

  const uint8_t* p_ = nullptr;
  const uint8_t* end_ = nullptr;
  Fail fail_ = Fail::None;
};

}  // namespace kv::mp

// Building msgpack values byte by byte for the decoder tests (the encoders the engines use are
// Python and Rust; these write exactly the forms a test names).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvtest::mp {

using Bytes = std::vector<uint8_t>;

inline void put_be(Bytes& o, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i) o.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A string of under 32 bytes (fixstr): keys and tags.
inline Bytes str(const std::string& s) {
  Bytes o{static_cast<uint8_t>(0xa0 | s.size())};
  for (char c : s) o.push_back(static_cast<uint8_t>(c));
  return o;
}

// The shortest unsigned form.
inline Bytes uint_of(uint64_t v) {
  Bytes o;
  if (v < 128) o.push_back(static_cast<uint8_t>(v));
  else if (v < 0x10000) o.push_back(0xcd), put_be(o, v, 2);
  else if (v < 0x100000000ULL) o.push_back(0xce), put_be(o, v, 4);
  else o.push_back(0xcf), put_be(o, v, 8);
  return o;
}

// Always the 9-byte form: uint64 (0xcf) or int64 (0xd3).
inline Bytes u64(uint64_t v) {
  Bytes o{0xcf};
  put_be(o, v, 8);
  return o;
}
inline Bytes i64(int64_t v) {
  Bytes o{0xd3};
  put_be(o, static_cast<uint64_t>(v), 8);
  return o;
}

inline Bytes f64(double v) {
  uint64_t bits;
  static_assert(sizeof bits == sizeof v);
  __builtin_memcpy(&bits, &v, 8);
  Bytes o{0xcb};
  put_be(o, bits, 8);
  return o;
}

inline Bytes bin(const Bytes& b) {
  Bytes o{0xc6};
  put_be(o, b.size(), 4);
  o.insert(o.end(), b.begin(), b.end());
  return o;
}

inline Bytes array(const std::vector<Bytes>& items) {
  Bytes o{0xdd};
  put_be(o, items.size(), 4);
  for (const Bytes& v : items) o.insert(o.end(), v.begin(), v.end());
  return o;
}

// A map of string keys, in the order given.
inline Bytes map(const std::vector<std::pair<std::string, Bytes>>& fields) {
  Bytes o{0xdf};
  put_be(o, fields.size(), 4);
  for (const auto& [k, v] : fields) {
    const Bytes key = str(k);
    o.insert(o.end(), key.begin(), key.end());
    o.insert(o.end(), v.begin(), v.end());
  }
  return o;
}

inline const Bytes nil{0xc0};

}  // namespace kvtest::mp

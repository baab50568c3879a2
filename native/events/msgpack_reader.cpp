#include "msgpack_reader.h"

#include "int_runs.h"

namespace kv::mp {

const char* type_name(Type t) {
  switch (t) {
    case Type::Nil:
      return "nil";
    case Type::Bool:
      return "bool";
    case Type::UInt:
    case Type::Int:
      return "int";
    case Type::Float:
      return "float";
    case Type::Str:
      return "str";
    case Type::Bin:
      return "bytes";
    case Type::Array:
      return "array";
    case Type::Map:
      return "map";
    case Type::Ext:
      return "ext";
    default:
      return "invalid";
  }
}

const char* failure_text(Fail f) {
  switch (f) {
    case Fail::Truncated:
      return "msgpack: truncated payload";
    case Fail::Length:
      return "msgpack: a length exceeds the bytes that remain";
    case Fail::TooDeep:
      return "msgpack: nested too deep";
    case Fail::BadByte:
      return "msgpack: invalid type byte";
    default:
      return "msgpack: malformed payload";
  }
}

bool Reader::read_nil() {
  if (!need(1) || *p_ != 0xc0) return false;
  ++p_;
  return true;
}

// Reads any integer encoding into (negative?, magnitude bits). Does not consume on a non-integer.
static bool int_bits(const uint8_t* p, size_t avail, uint64_t& u, bool& is_signed, int& size) {
  if (avail < 1) return false;
  const uint8_t b = p[0];
  if (b <= 0x7f) {
    u = b;
    is_signed = false;
    size = 1;
    return true;
  }
  if (b >= 0xe0) {
    u = static_cast<uint64_t>(static_cast<int64_t>(static_cast<int8_t>(b)));
    is_signed = true;
    size = 1;
    return true;
  }
  int n;
  switch (b) {
    case 0xcc:
    case 0xd0:
      n = 1;
      break;
    case 0xcd:
    case 0xd1:
      n = 2;
      break;
    case 0xce:
    case 0xd2:
      n = 4;
      break;
    case 0xcf:
    case 0xd3:
      n = 8;
      break;
    default:
      return false;
  }
  if (avail < static_cast<size_t>(1 + n)) return false;
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[1 + i];
  is_signed = b >= 0xd0;
  if (is_signed && n < 8) {  // sign-extend
    const int shift = 64 - 8 * n;
    v = static_cast<uint64_t>(static_cast<int64_t>(v << shift) >> shift);
  }
  u = v;
  size = 1 + n;
  return true;
}

bool Reader::read_int(int64_t& v) {
  uint64_t u;
  bool s;
  int size;
  if (!int_bits(p_, remaining(), u, s, size)) return false;
  if (!s && u > static_cast<uint64_t>(INT64_MAX)) return false;
  v = static_cast<int64_t>(u);
  p_ += size;
  return true;
}

bool Reader::read_hash_slow(int64_t& v) {
  uint64_t u;
  bool s;
  int size;
  if (!int_bits(p_, remaining(), u, s, size)) return false;
  v = static_cast<int64_t>(u);
  p_ += size;
  return true;
}

bool Reader::read_uint32(uint32_t& v) {
  uint64_t u;
  bool s;
  int size;
  if (!int_bits(p_, remaining(), u, s, size)) return false;
  if (s && static_cast<int64_t>(u) < 0) return false;
  if (u > 0xffffffffULL) return false;
  v = static_cast<uint32_t>(u);
  p_ += size;
  return true;
}

bool Reader::read_number(double& v) {
  if (p_ < end_ && *p_ == 0xca) {
    if (!need(5)) return false;
    ++p_;
    uint32_t bits = static_cast<uint32_t>(be(4));
    float f;
    std::memcpy(&f, &bits, 4);
    v = f;
    return true;
  }
  if (p_ < end_ && *p_ == 0xcb) {
    if (!need(9)) return false;
    ++p_;
    uint64_t bits = be(8);
    std::memcpy(&v, &bits, 8);
    return true;
  }
  uint64_t u;
  bool s;
  int size;
  if (!int_bits(p_, remaining(), u, s, size)) return false;
  v = s ? static_cast<double>(static_cast<int64_t>(u)) : static_cast<double>(u);
  p_ += size;
  return true;
}

bool Reader::read_len_prefixed(uint8_t b, std::string_view& s, bool str) {
  size_t len;
  if (str && b >= 0xa0 && b <= 0xbf) {
    len = b & 0x1f;
    ++p_;
  } else {
    int n = (b == (str ? 0xd9 : 0xc4)) ? 1 : (b == (str ? 0xda : 0xc5)) ? 2 : (b == (str ? 0xdb : 0xc6)) ? 4 : 0;
    if (n == 0) return false;
    if (!need(1 + n)) return false;
    ++p_;
    len = be(n);
  }
  if (len > remaining()) return fail(Fail::Length);
  s = std::string_view(reinterpret_cast<const char*>(p_), len);
  p_ += len;
  return true;
}

bool Reader::read_str_slow(std::string_view& s) {
  if (peek() != Type::Str) return false;
  return read_len_prefixed(*p_, s, true);
}

bool Reader::read_bin(std::string_view& s) {
  if (peek() != Type::Bin) return false;
  return read_len_prefixed(*p_, s, false);
}

bool Reader::read_array(uint32_t& n) {
  if (p_ >= end_) return false;
  const uint8_t b = *p_;
  uint64_t len;
  if (b >= 0x90 && b <= 0x9f) {
    len = b & 0x0f;
    ++p_;
  } else if (b == 0xdc || b == 0xdd) {
    const int w = b == 0xdc ? 2 : 4;
    if (!need(1 + w)) return false;
    ++p_;
    len = be(w);
  } else {
    return false;
  }
  if (len > remaining()) return fail(Fail::Length);  // every element takes at least one byte
  n = static_cast<uint32_t>(len);
  return true;
}

bool Reader::read_map(uint32_t& n) {
  if (p_ >= end_) return false;
  const uint8_t b = *p_;
  uint64_t len;
  if (b >= 0x80 && b <= 0x8f) {
    len = b & 0x0f;
    ++p_;
  } else if (b == 0xde || b == 0xdf) {
    const int w = b == 0xde ? 2 : 4;
    if (!need(1 + w)) return false;
    ++p_;
    len = be(w);
  } else {
    return false;
  }
  if (2 * len > remaining()) return fail(Fail::Length);  // a key and a value, one byte each at least
  n = static_cast<uint32_t>(len);
  return true;
}

namespace {

// Per first byte: bytes an integer encoding takes (0: not an integer), and the same for the
// encodings that always hold a uint32 (positive fixint, uint8/16/32). Table lookups keep the
// integer-run loops free of data-dependent branches (token ids mix 3- and 5-byte forms at random).
struct IntTables {
  uint8_t any[256] = {};
  uint8_t u32[256] = {};
  IntTables() {
    for (int b = 0; b <= 0x7f; ++b) any[b] = u32[b] = 1;
    for (int b = 0xe0; b <= 0xff; ++b) any[b] = 1;
    any[0xcc] = any[0xd0] = 2;
    any[0xcd] = any[0xd1] = 3;
    any[0xce] = any[0xd2] = 5;
    any[0xcf] = any[0xd3] = 9;
    u32[0xcc] = 2;
    u32[0xcd] = 3;
    u32[0xce] = 5;
  }
};
const IntTables kInt;

}  // namespace

bool Reader::skip_uint32s(uint32_t n, uint32_t& bad) {
  const uint8_t* p = p_;
  // The SIMD path takes what it can (int_runs.h); the loops below check the rest.
  uint32_t i = skip_u32_forms(p, end_, n);
  // While 5 bytes remain: the size from the type byte by arithmetic, not a table load, so the
  // dependency from one id to the next is one load and a few ALU operations; forms other than
  // fixint/uint8/16/32 only set a flag, and the general loop below re-reads from where it began.
  {
    const uint8_t* q = p;
    uint32_t j = i;
    uint32_t odd = 0;
    for (; j < n && end_ - q >= 5; ++j) {
      const uint32_t b = q[0];
      const uint32_t x = b - 0xcb;  // cc -> 1, cd -> 2, ce -> 3
      const bool small = b < 0x80;
      const bool sized = x - 1 <= 2;
      odd |= !small & !sized;
      q += small || !sized ? 1 : x + 1 + (x == 3);  // at most 5: q stays inside the payload
    }
    if (!odd) {
      p = q;
      i = j;
    }
  }
  for (; i < n; ++i) {
    if (p >= end_) {
      p_ = p;
      return fail(Fail::Truncated);
    }
    const uint8_t sz = kInt.u32[*p];
    if (sz && static_cast<size_t>(end_ - p) >= sz) {
      p += sz;
      continue;
    }
    // Any other form (int8..int64 holding a small value, truncation): the general reader.
    p_ = p;
    uint32_t v;
    if (!read_uint32(v)) {
      if (!need(1)) return false;
      bad = i;
      return false;
    }
    p = p_;
  }
  p_ = p;
  return true;
}

void Reader::read_checked_uint32s(uint32_t n, uint32_t* out) {
  // Checked already, so the check read_uint32s makes on the way cannot fail here.
  uint32_t bad;
  read_uint32s(n, out, bad);
}

bool Reader::read_uint32s(uint32_t n, uint32_t* out, uint32_t& bad) {
  const uint8_t* p = p_;
  // The SIMD path decodes what it can and stops at any other form (int_runs.h); then, while 5
  // bytes remain, every uint32 form is decoded without data-dependent branches.
  uint32_t i = decode_u32_forms(p, end_, n, out);
  for (; i < n && end_ - p >= 5; ++i) {
    const uint8_t b = p[0];
    const uint8_t sz = kInt.u32[b];
    if (!sz) break;
    const uint32_t v8 = p[1];
    const uint32_t v16 = (uint32_t(p[1]) << 8) | p[2];
    const uint32_t v32 = (uint32_t(p[1]) << 24) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 8) | p[4];
    out[i] = sz == 1 ? b : sz == 2 ? v8 : sz == 3 ? v16 : v32;
    p += sz;
  }
  p_ = p;
  // The rest (the payload's last bytes, other integer forms): the general reader.
  for (; i < n; ++i) {
    if (!read_uint32(out[i])) {
      if (!need(1)) return false;
      bad = i;
      return false;
    }
  }
  return true;
}

bool Reader::skip_slow(int max_depth) {
  // Iterative: `pending` counts the values still to skip at this point of the walk; nesting is
  // bounded by max_depth through a small stack of counts.
  uint64_t stack[64];
  if (max_depth > 64) max_depth = 64;
  int depth = 0;
  uint64_t pending = 1;
  while (true) {
    while (pending == 0) {
      if (depth == 0) return true;
      pending = stack[--depth];
    }
    --pending;
    if (p_ >= end_) return fail(Fail::Truncated);
    const uint8_t b = *p_;
    const Type t = peek();
    uint32_t n;
    std::string_view s;
    switch (t) {
      case Type::Nil:
      case Type::Bool:
        ++p_;
        break;
      case Type::UInt:
      case Type::Int: {
        int64_t v;
        if (!read_hash(v)) return fail(Fail::Truncated);
        break;
      }
      case Type::Float:
        if (!need(b == 0xca ? 5 : 9)) return false;
        p_ += b == 0xca ? 5 : 9;
        break;
      case Type::Str:
      case Type::Bin:
        if (!read_len_prefixed(b, s, t == Type::Str)) return fail(Fail::Truncated);
        break;
      case Type::Ext: {
        size_t len;
        if (b >= 0xd4 && b <= 0xd8) {
          len = size_t(1) << (b - 0xd4);
          if (!need(2 + len)) return false;
          p_ += 2 + len;
        } else {
          const int w = b == 0xc7 ? 1 : b == 0xc8 ? 2 : 4;
          if (!need(1 + w + 1)) return false;
          ++p_;
          len = be(w);
          ++p_;  // ext type
          if (len > remaining()) return fail(Fail::Length);
          p_ += len;
        }
        break;
      }
      case Type::Array:
      case Type::Map: {
        bool okh = t == Type::Array ? read_array(n) : read_map(n);
        if (!okh) return fail(Fail::Truncated);
        uint64_t items = t == Type::Array ? uint64_t(n) : 2 * uint64_t(n);
        // Runs of integers (token ids, hashes) in a tight loop.
        while (items && p_ < end_) {
          const uint8_t sz = kInt.any[*p_];
          if (!sz) break;
          if (remaining() < sz) return fail(Fail::Truncated);
          p_ += sz;
          --items;
        }
        if (items == 0) break;
        if (depth >= max_depth) return fail(Fail::TooDeep);
        stack[depth++] = pending;
        pending = items;
        break;
      }
      default:
        return fail(Fail::BadByte);
    }
  }
}

}  // namespace kv::mp

// The fast path of sglang_stored.h. Each step checks the form it expects and gives up on
// anything else, so an event it accepts decodes to what the tagged-map adapter and append()
// would make of it.
#include "sglang_stored.h"

#include "stored_keys.h"

namespace kv::events {
namespace {

using namespace stored_keys;

bool hash64(const uint8_t* p) {
  return *p == 0xcf || *p == 0xd3;
}

// An event leaving the fast path gives back the token ids it read.
bool untake(Batch& b, size_t tok_at) {
  b.tokens.resize(tok_at);
  return false;
}

}  // namespace

bool decode_sglang_stored(mp::Reader& r, bool want_tokens, Batch& b) {
  mp::Reader ev = r;
  // 6 keys, or 7 with medium (the other optional fields, when set, take the general path).
  const uint8_t* p = ev.pos();
  if (ev.remaining() < 1 || (*p != 0x86 && *p != 0x87)) return false;
  const bool has_medium = *p == 0x87;
  uint32_t n;
  ev.read_map(n);
  if (!ev.consume(kHead) || ev.remaining() < 1) return false;
  p = ev.pos();
  const uint32_t nh = *p & 0x0f;
  if ((*p & 0xf0) != 0x90 || ev.remaining() < 1 + 9 * size_t(nh)) return false;
  for (uint32_t i = 0; i < nh; ++i)
    if (!hash64(p + 1 + 9 * i)) return false;
  const uint8_t* hashes = p + 1;
  ev = mp::Reader(p + 1 + 9 * nh, ev.remaining() - 1 - 9 * nh);
  Event e;
  e.kind = kStored;
  if (!ev.consume(kParent) || ev.remaining() < 1) return false;
  if (*ev.pos() == 0xc0) {
    ev.read_nil();
  } else {
    if (!hash64(ev.pos()) || !ev.read_hash(e.parent)) return false;
    e.has_parent = true;
  }
  // token_ids: an array of plain ids, every one a uint32 (bigram pairs and bad ids: general path).
  uint32_t nt;
  if (!ev.consume(kTokens) || ev.peek() != mp::Type::Array || !ev.read_array(nt)) return false;
  if (nt > 0 && ev.peek() == mp::Type::Array) return false;
  // With tokens wanted they are read as they are checked, into the batch, and taken back if the
  // rest of the event does not take this path.
  const size_t tok_at = b.tokens.size();
  uint32_t bad;
  if (want_tokens && nt) {
    b.tokens.resize(tok_at + nt);
    if (!ev.read_uint32s(nt, b.tokens.data() + tok_at, bad)) return untake(b, tok_at);
  } else if (!ev.skip_uint32s(nt, bad)) {
    return false;
  }
  // block_size: a positive int that fits int32.
  int64_t bs;
  if (!ev.consume(kBlockSize) || ev.peek() != mp::Type::UInt || !ev.read_int(bs) || bs <= 0 || bs > INT32_MAX)
    return untake(b, tok_at);
  e.block_size = static_cast<int32_t>(bs);
  if (!ev.consume(kLoraId) || !ev.consume(kNil)) return untake(b, tok_at);
  if (has_medium) {
    std::string_view m;
    if (!ev.consume(kMedium) || ev.peek() != mp::Type::Str || !ev.read_str(m) || !tier_of_medium(m, e.tier))
      return untake(b, tok_at);
    e.medium = {true, m};
  }
  // Valid: append.
  e.hash_begin = static_cast<uint32_t>(b.hashes.size());
  b.hashes.resize(b.hashes.size() + nh);
  int64_t* hv = b.hashes.data() + e.hash_begin;
  for (uint32_t i = 0; i < nh; ++i) {
    uint64_t u;
    std::memcpy(&u, hashes + 9 * i + 1, 8);
    hv[i] = static_cast<int64_t>(__builtin_bswap64(u));
  }
  e.hash_end = static_cast<uint32_t>(b.hashes.size());
  e.tok_begin = static_cast<uint32_t>(tok_at);
  e.tok_end = static_cast<uint32_t>(b.tokens.size());
  e.units = nt;
  b.events.push_back(e);
  r = ev;
  return true;
}

}  // namespace kv::events

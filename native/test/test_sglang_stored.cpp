// The BlockStored fast path (sglang_stored.h) against the adapters alone (Limits::fast_path off):
// SGLang-shaped events with one field at a time changed to another form, valid or not (hash and
// parent forms, nil and non-nil fields, media, block sizes, bad and bigram token ids, keys out
// of order, extra keys, truncation) must decode to the same batch, bad events included, and tell a
// HashSink the same hashes.
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "event_batch.h"
#include "msgpack_build.h"

using namespace kv;

namespace {

using kvtest::mp::Bytes;
using kvtest::mp::put_be;
using kvtest::mp::str;
using kvtest::mp::uint_of;

Bytes hash_of(uint64_t h, int form) {
  Bytes o;
  switch (form) {
    case 0:
      o.push_back(0xcf), put_be(o, h, 8);
      break;       // uint64 (msgspec, non-negative)
    case 1:
      o.push_back(0xd3), put_be(o, h | (1ULL << 63), 8);
      break;  // int64, negative
    case 2:
      o = uint_of(h & 0xffff);
      break;                   // a small hash: a short form
    case 3:
      o.push_back(0xcb), put_be(o, 0x3ff0000000000000ULL, 8);
      break;  // a float: bad
    default:
      o = str("h");
      break;                              // a string: bad
  }
  return o;
}

struct Field {
  std::string key;
  Bytes value;
};

Bytes event(const std::vector<Field>& fields) {
  Bytes o{static_cast<uint8_t>(0x80 | fields.size())};
  for (const auto& f : fields) {
    const Bytes k = str(f.key);
    o.insert(o.end(), k.begin(), k.end());
    o.insert(o.end(), f.value.begin(), f.value.end());
  }
  return o;
}

// Block sizes the general path refuses (zero, negative, past int32), or takes in a longer form.
Bytes pick_block_size(std::mt19937& rng) {
  switch (rng() % 4) {
    case 0:
      return {0x00};                               // zero
    case 1:
      return {0xff};                               // -1
    case 2:
      return Bytes{0xcf, 0, 0, 0, 1, 0, 0, 0, 0};  // past int32
    default:
      return {0xcd, 0x01, 0x00};                 // 256 in a uint16
  }
}

// An SGLang BlockStored, then one change picked by `change` (0: none).
Bytes stored(std::mt19937& rng, int change) {
  const uint32_t nh = 1 + rng() % 4;
  Bytes hashes{static_cast<uint8_t>(0x90 | nh)};
  for (uint32_t i = 0; i < nh; ++i) {
    const Bytes h = hash_of(rng() | uint64_t(rng()) << 32, change == 1 ? static_cast<int>(rng() % 5) : 0);
    hashes.insert(hashes.end(), h.begin(), h.end());
  }
  const uint32_t page = change == 6 ? 3 : 4;
  const uint32_t nt = change == 7 ? 0 : nh * page;
  Bytes tokens{0xdc};
  put_be(tokens, nt, 2);
  for (uint32_t i = 0; i < nt; ++i) {
    Bytes t = uint_of(rng() % 200000);
    if (change == 8 && i == nt / 2) t = {0xff};                          // a negative id
    if (change == 9 && i == 0) t = {0x92, 0x01, 0x02};                   // a bigram pair
    if (change == 10 && i == nt - 1) t = {0xd0, 0x05};                   // int8 holding 5: valid
    tokens.insert(tokens.end(), t.begin(), t.end());
  }
  Bytes parent = change == 2 ? Bytes{0xc0} : hash_of(rng(), change == 3 ? static_cast<int>(rng() % 5) : 0);
  Bytes bs = uint_of(page);
  if (change == 11) bs = pick_block_size(rng);
  std::vector<Field> f = {{"type", str(change == 12 ? "BlockRemoved" : "BlockStored")},
                          {"block_hashes", hashes},
                          {"parent_block_hash", parent},
                          {"token_ids", tokens},
                          {"block_size", bs},
                          {"lora_id", change == 13 ? uint_of(3) : Bytes{0xc0}}};
  if (change != 14)
    f.push_back({"medium", change == 15 ? str("TAPE") : change == 16 ? Bytes{0xc0} : str("CPU_PINNED")});
  if (change == 17) f.push_back({"cache_salt", str("salt")});
  if (change == 18) std::swap(f[2], f[3]);
  if (change == 19) f.insert(f.begin() + 1, {"extra", uint_of(1)});
  return event(f);
}

// A HashSink that keeps what it is told.
struct Seen {
  std::vector<int64_t> hashes;
  events::HashSink sink{[](void* self, const int64_t* h, size_t n) {
                          auto& v = static_cast<Seen*>(self)->hashes;
                          v.insert(v.end(), h, h + n);
                        },
                        this};
};

}  // namespace

TEST_CASE(sglang_stored, fast_path_decodes_as_the_adapters_do) {
  std::mt19937 rng(5);
  events::Limits general;
  general.fast_path = false;
  for (int iter = 0; iter < 4000; ++iter) {
    Bytes p = {0x93, 0xcb, 0x41, 0xd9, 0x54, 0xfc, 0x40, 0x07, 0xdf, 0x3b};
    const int k = 1 + static_cast<int>(rng() % 4);
    p.push_back(static_cast<uint8_t>(0x90 | k));
    for (int e = 0; e < k; ++e) {
      const Bytes ev = stored(rng, rng() % 3 ? 0 : static_cast<int>(rng() % 20));
      p.insert(p.end(), ev.begin(), ev.end());
    }
    p.push_back(0);
    if (iter % 17 == 0) p.resize(rng() % p.size());
    for (bool tokens : {false, true}) {
      events::Batch fast, ref;
      Seen seen_fast, seen_ref;
      const bool ok_fast = events::decode_batch(p.data(), p.size(), {}, tokens, fast, &seen_fast.sink);
      CHECK_EQ(events::decode_batch(p.data(), p.size(), general, tokens, ref, &seen_ref.sink), ok_fast);
      // Both paths announce each good event's hashes, in order, and nothing of a bad one.
      if (ok_fast) CHECK(seen_fast.hashes == fast.hashes && seen_ref.hashes == ref.hashes);
      CHECK(fast.error == ref.error && fast.error_text == ref.error_text);
      CHECK(fast.hashes == ref.hashes && fast.tokens == ref.tokens);
      CHECK_EQ(fast.events.size(), ref.events.size());
      for (size_t i = 0; i < fast.events.size() && i < ref.events.size(); ++i) {
        const auto &a = fast.events[i], &b = ref.events[i];
        CHECK(a.kind == b.kind && a.tier == b.tier && a.has_parent == b.has_parent && a.parent == b.parent);
        CHECK(a.block_size == b.block_size && a.units == b.units && a.bigram == b.bigram);
        CHECK(a.hash_begin == b.hash_begin && a.hash_end == b.hash_end && a.tok_begin == b.tok_begin &&
              a.tok_end == b.tok_end);
        CHECK(a.medium.present == b.medium.present && a.medium.value == b.medium.value);
        CHECK(a.cache_salt.present == b.cache_salt.present && a.has_lora_id == b.has_lora_id);
      }
      CHECK_EQ(fast.bad.size(), ref.bad.size());
      for (size_t i = 0; i < fast.bad.size() && i < ref.bad.size(); ++i)
        CHECK(fast.bad[i].index == ref.bad[i].index && fast.bad[i].kind == ref.bad[i].kind &&
              fast.bad[i].reason == ref.bad[i].reason);
    }
  }
}

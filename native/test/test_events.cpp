// The bounded msgpack reader and the batch decoder on the allocation bombs and malformed input
// that must be refused before anything is allocated, and the index's deletion path.
#include <cstring>
#include <vector>

#include "block_index.h"
#include "check.h"
#include "event_batch.h"
#include "msgpack_reader.h"

using namespace kv;

TEST_CASE(events, length_headers_checked_against_bytes_left) {
  const uint8_t bomb[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
  mp::Reader r(bomb, sizeof bomb);
  uint32_t n = 0;
  CHECK(!r.read_array(n));
  CHECK(r.failure() == mp::Fail::Length);
  const uint8_t str[] = {0xdb, 0x00, 0x00, 0x10, 0x00, 'a'};
  mp::Reader s(str, sizeof str);
  std::string_view v;
  CHECK(!s.read_str(v) && s.failure() == mp::Fail::Length);
  events::Batch b;
  CHECK(!events::decode_batch(bomb, sizeof bomb, {}, false, b));
  CHECK(b.error == events::BatchError::Msgpack && b.events.empty());
}

TEST_CASE(events, too_many_events_refused_at_the_header) {
  std::vector<uint8_t> p = {0x93, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xdd, 0x00, 0x10, 0x00, 0x00};
  p.insert(p.end(), 1 << 20, 0xc0);
  p.push_back(0);
  events::Batch b;
  CHECK(!events::decode_batch(p.data(), p.size(), {}, false, b));
  CHECK(b.error == events::BatchError::TooManyEvents);
  events::Limits big;
  big.max_events = 1 << 21;
  CHECK(events::decode_batch(p.data(), p.size(), big, false, b));
  CHECK(b.events.empty() && b.bad.size() == (1u << 20) && b.bad[0].kind == events::BadKind::NotAnEvent);
  CHECK(b.events.capacity() <= 4096);  // no allocation sized by the header's claim
}

TEST_CASE(events, deletion_keeps_probe_runs_intact) {
  index::BlockIndex idx;
  std::vector<int64_t> h(3000);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<int64_t>(i * 0x9e3779b97f4a7c15ULL);
  index::ApplyCounts c;
  idx.store(0, 0, h.data(), h.size(), false, 0, c);
  CHECK(c.added == h.size() && idx.blocks() == h.size());
  // remove every other block, then every remaining one must still be found
  for (size_t i = 0; i < h.size(); i += 2) idx.remove(0, 0, &h[i], 1, c);
  CHECK(c.removed == h.size() / 2 && idx.blocks() == h.size() / 2);
  for (size_t i = 0; i < h.size(); ++i) CHECK(idx.lookup(h[i]).found == (i % 2 == 1));
  CHECK(idx.clear(0) == h.size() / 2 && idx.blocks() == 0);
}

TEST_CASE(events, medium_names_map_to_tiers_case_blind) {
  struct Case {
    const char* name;
    bool ok;
    uint8_t tier;
  };
  const Case cases[] = {
      {"", true, events::kGpu},
      {"GPU", true, events::kGpu},
      {"gpu", true, events::kGpu},
      {"Device", true, events::kGpu},
      {"cpu_pinned", true, events::kCpuPinned},
      {"CPU_TIER1", true, events::kCpuPinned},
      {"cpu_tier2", true, events::kDisk},
      {"NvMe", true, events::kDisk},
      {"external", true, events::kExternal},
      {"Shared", true, events::kExternal},
      {"GPU0", false, 0},
      {"GP", false, 0},
      {"g\xc3\xa9pu", false, 0},
      {"EXTERNAL_STORAGE_X", false, 0},  // 18 bytes: longer than any name
  };
  for (const Case& c : cases) {
    uint8_t tier = 0xff;
    CHECK_EQ(events::tier_of_medium(c.name, tier), c.ok);
    if (c.ok) CHECK_EQ(int(tier), int(c.tier));
    else CHECK_EQ(int(tier), 0xff);  // a refused name leaves the tier as it was
  }
}

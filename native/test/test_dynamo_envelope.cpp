// Dynamo's event-plane envelope (adapters/dynamo_envelope.h): what a good frame decodes to (u64
// engine hashes as kvctl's signed keys, tokens hashes as u64, tiers, defaults), and that a bad
// frame is refused whole with the bad field's dotted path, before anything sized by a header is
// allocated.
#include <string>
#include <vector>

#include "adapters/dynamo_envelope.h"
#include "check.h"
#include "event_batch.h"
#include "msgpack_build.h"

using namespace kv::events;
namespace pk = kvtest::mp;
using pk::Bytes;

namespace {

Bytes frame_of(const Bytes& envelope) {
  Bytes o{1};
  pk::put_be(o, envelope.size(), 4);
  o.insert(o.end(), envelope.begin(), envelope.end());
  return o;
}

Bytes envelope_of(const Bytes& payload, const Bytes& sequence = pk::uint_of(5)) {
  return frame_of(pk::map({{"publisher_id", pk::u64(0xfedcba9876543210ULL)},
                           {"sequence", sequence},
                           {"published_at", pk::uint_of(1)},
                           {"topic", pk::str("kv-events")},
                           {"payload", pk::bin(payload)}}));
}

Bytes record(const Bytes& data, const Bytes& tier = pk::str("device"), const Bytes& event_id = pk::uint_of(1)) {
  return pk::map({{"worker_id", pk::u64(3404231588825800073ULL)},
                  {"storage_tier", tier},
                  {"residency_domain", pk::str("worker")},
                  {"event", pk::map({{"event_id", event_id}, {"data", data}})},
                  {"dp_rank", pk::uint_of(0)}});
}

Bytes stored(const Bytes& parent, const std::vector<std::pair<Bytes, Bytes>>& blocks) {
  std::vector<Bytes> bs;
  for (const auto& [h, t] : blocks)
    bs.push_back(pk::map({{"block_hash", h}, {"tokens_hash", t}, {"mm_extra_info", pk::nil}}));
  return pk::map(
      {{"stored", pk::map({{"parent_hash", parent}, {"start_position", pk::nil}, {"blocks", pk::array(bs)}})}});
}

bool refused(const Bytes& f, const std::string& field, dynamo::Frame& out) {
  const bool ok = dynamo::decode_envelope(f.data(), f.size(), out);
  if (ok || out.error_field != field)
    std::fprintf(stderr, "  expected a refusal at %s, got %s (%s: %s)\n", field.c_str(), ok ? "a frame" : "a refusal",
                 out.error_field.c_str(), out.error_text.c_str());
  return !ok && out.error_field == field && !out.error_text.empty() && out.records.empty() && out.blocks.empty() &&
         out.hashes.empty();
}

}  // namespace

TEST_CASE(dynamo_envelope, stored_removed_cleared_decode) {
  const Bytes payload = pk::array(
      {record(stored(pk::nil,
                     {{pk::u64(0xffffffffffffffffULL), pk::u64(0x8000000000000001ULL)}, {pk::i64(-5), pk::uint_of(7)}}),
              pk::str("host_pinned")),
       record(stored(pk::u64(0x8000000000000000ULL), {}), pk::nil, pk::i64(-3)),
       record(pk::map({{"removed", pk::map({{"block_hashes", pk::array({pk::u64(1ULL << 63), pk::uint_of(9)})}})}})),
       record(pk::str("cleared")), record(pk::map({{"cleared", pk::nil}}))});
  const Bytes f = envelope_of(payload);
  dynamo::Frame out;
  CHECK(dynamo::decode_envelope(f.data(), f.size(), out));
  CHECK(out.publisher_id.bits == 0xfedcba9876543210ULL && !out.publisher_id.negative);
  CHECK(out.sequence.bits == 5 && !out.sequence.negative);
  CHECK_EQ(out.records.size(), size_t(5));
  if (out.records.size() != 5) return;
  const auto& s = out.records[0];
  CHECK(s.kind == dynamo::kStored && !s.has_parent && s.tier == kCpuPinned && s.storage_tier == "host_pinned");
  CHECK(s.worker_id == 3404231588825800073ULL && s.dp_rank == 0 && s.event_id.bits == 1 && !s.event_id.negative);
  CHECK(s.begin == 0 && s.end == 2 && out.blocks.size() == 2);
  CHECK(out.blocks[0].block_hash == -1 && out.blocks[0].tokens_hash == 0x8000000000000001ULL);
  CHECK(out.blocks[1].block_hash == -5 && out.blocks[1].tokens_hash == 7);
  const auto& p = out.records[1];
  CHECK(p.kind == dynamo::kStored && p.has_parent && p.parent == INT64_MIN && p.begin == p.end);
  CHECK(p.storage_tier == "device" && p.tier == kGpu);  // absent (nil) storage_tier: device
  CHECK(p.event_id.negative && static_cast<int64_t>(p.event_id.bits) == -3);
  const auto& r = out.records[2];
  CHECK(r.kind == dynamo::kRemoved && r.end - r.begin == 2 && out.hashes.size() == 2);
  CHECK(out.hashes[0] == INT64_MIN && out.hashes[1] == 9);
  CHECK(out.records[3].kind == dynamo::kCleared && out.records[4].kind == dynamo::kCleared);
}

TEST_CASE(dynamo_envelope, framing_refused_as_frame) {
  dynamo::Frame out;
  Bytes good = envelope_of(pk::array({}));
  CHECK(dynamo::decode_envelope(good.data(), good.size(), out) && out.records.empty());
  CHECK(refused(Bytes{1, 0, 0}, "frame", out));
  Bytes v2 = good;
  v2[0] = 2;
  CHECK(refused(v2, "frame", out));
  CHECK(out.error_text == "envelope version 2 (expected 1)");
  Bytes cut(good.begin(), good.begin() + 20);
  CHECK(refused(cut, "frame", out));
}

TEST_CASE(dynamo_envelope, bad_fields_named_by_path) {
  dynamo::Frame out;
  const Bytes ok_block = stored(pk::nil, {{pk::uint_of(1), pk::uint_of(2)}});
  // A good frame first: a refusal after it keeps nothing of it.
  const Bytes good = envelope_of(pk::array({record(ok_block)}));
  CHECK(dynamo::decode_envelope(good.data(), good.size(), out) && out.blocks.size() == 1);
  CHECK(refused(envelope_of(pk::array({record(ok_block), record(stored(pk::nil, {{pk::str("x"), pk::uint_of(2)}}))})),
                "payload[1].event.data.stored.blocks[0].block_hash", out));
  CHECK(out.error_text == "expected an integer, got str");
  CHECK(refused(envelope_of(pk::array({record(stored(pk::nil, {{pk::uint_of(1), pk::f64(2.5)}}))})),
                "payload[0].event.data.stored.blocks[0].tokens_hash", out));
  CHECK(refused(envelope_of(pk::array({record(stored(pk::str("p"), {}))})), "payload[0].event.data.stored.parent_hash",
                out));
  CHECK(refused(envelope_of(pk::array({record(ok_block, pk::str("tape"))})), "payload[0].storage_tier", out));
  CHECK(out.error_text == "unknown tier 'tape'");
  CHECK(refused(envelope_of(pk::array({record(ok_block, pk::uint_of(1))})), "payload[0].storage_tier", out));
  CHECK(refused(envelope_of(pk::array({record(pk::map({{"moved", pk::nil}, {"x", pk::nil}}))})),
                "payload[0].event.data", out));
  CHECK(out.error_text == "unknown event kind (moved,x)");
  CHECK(refused(envelope_of(pk::array({record(pk::str("other"))})), "payload[0].event.data", out));
  CHECK(refused(envelope_of(pk::array({record(pk::map({{"removed", pk::map({{"block_hashes", pk::uint_of(1)}})}}))})),
                "payload[0].event.data.removed.block_hashes", out));
  CHECK(refused(envelope_of(pk::array({record(ok_block, pk::str("device"), pk::nil)})), "payload[0].event.event_id",
                out));
  CHECK(refused(envelope_of(pk::array({pk::uint_of(3)})), "payload[0]", out));
  CHECK(refused(envelope_of(pk::map({})), "payload", out));
  CHECK(refused(envelope_of(pk::array({}), pk::str("5")), "envelope.sequence", out));
  CHECK(refused(frame_of(pk::map({{"payload", pk::str("not bytes")}})), "envelope.payload", out));
  CHECK(refused(frame_of(pk::array({})), "envelope", out));
  // A value broken inside the payload: reported as such, before any field.
  Bytes inner = pk::array({record(ok_block)});
  inner.resize(inner.size() - 3);
  CHECK(refused(envelope_of(inner), "payload", out));
  Bytes trailing = pk::array({});
  trailing.push_back(0xc0);
  CHECK(refused(envelope_of(trailing), "payload", out));
}

TEST_CASE(dynamo_envelope, integral_floats_count_as_integers) {
  // JavaScript encoders write integers above 2^32 as float64.
  dynamo::Frame out;
  const Bytes f = envelope_of(pk::array({record(stored(pk::f64(1099511627776.0), {{pk::f64(-2.0), pk::uint_of(1)}}))}));
  CHECK(dynamo::decode_envelope(f.data(), f.size(), out));
  CHECK(out.records.size() == 1 && out.records[0].parent == 1099511627776LL && out.blocks[0].block_hash == -2);
  CHECK(refused(envelope_of(pk::array({record(stored(pk::f64(1e30), {}))})), "payload[0].event.data.stored.parent_hash",
                out));
}

TEST_CASE(dynamo_envelope, length_bombs_refused_before_allocation) {
  dynamo::Frame out;
  // A payload claiming 4 billion records in 5 bytes.
  CHECK(refused(envelope_of(Bytes{0xdd, 0xff, 0xff, 0xff, 0xff}), "payload", out));
  CHECK(out.records.capacity() == 0);
  // An envelope whose payload bin claims more bytes than the frame holds.
  Bytes env = pk::map({{"payload", Bytes{0xc6, 0x7f, 0xff, 0xff, 0xff}}});
  CHECK(refused(frame_of(env), "envelope", out));
}

TEST_CASE(dynamo_envelope, storage_tiers) {
  uint8_t t = 0xff;
  CHECK(dynamo::tier_of_storage("device", t) && t == kGpu);
  CHECK(dynamo::tier_of_storage("host_pinned", t) && t == kCpuPinned);
  CHECK(dynamo::tier_of_storage("HOST_PINNED", t) && t == kCpuPinned);
  CHECK(dynamo::tier_of_storage("disk", t) && t == kDisk);
  CHECK(dynamo::tier_of_storage("external", t) && t == kExternal);
  CHECK(dynamo::tier_of_storage("cpu_tier2", t) && t == kDisk);  // the engines' medium names too
  CHECK(!dynamo::tier_of_storage("host_pinned2", t) && !dynamo::tier_of_storage("tape", t));
}

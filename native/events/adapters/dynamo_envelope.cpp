// Dynamo's event-plane envelope (dynamo_envelope.h). The envelope and its payload are first
// stepped over whole (bounded depth, no trailing bytes), so a broken msgpack value is reported as
// such before any field is looked at; fields are then read by name, last occurrence winning.
#include "dynamo_envelope.h"

#include <cmath>

#include "adapter.h"

namespace kv::events::dynamo {

namespace {

constexpr uint8_t kEnvelopeVersion = 1;
constexpr int kMaxDepth = 32;

struct Fail {
  std::string field, text;
};

[[noreturn]] void fail(std::string field, std::string text) {
  throw Fail{std::move(field), std::move(text)};
}

bool absent(const mp::Reader& r) {
  return r.remaining() == 0 || r.peek() == mp::Type::Nil;
}

const char* kind_of(const mp::Reader& r) {
  return r.remaining() == 0 ? "nothing" : mp::type_name(r.peek());
}

// `bytes` must hold exactly one well-formed msgpack value; reported under `field` if not.
mp::Reader whole_value(const uint8_t* p, size_t n, const char* field) {
  mp::Reader r(p, n);
  if (n == 0) fail(field, "msgpack: empty");
  if (!r.skip(kMaxDepth)) fail(field, mp::failure_text(r.failure()));
  if (!r.at_end()) fail(field, "msgpack: " + std::to_string(r.remaining()) + " trailing byte(s)");
  return mp::Reader(p, n);
}

// The values of `keys` in the map `r` holds (a default Reader for a key that is absent).
template <size_t N>
void map_fields(const mp::Reader& r, const std::string& field, const char* const (&keys)[N], mp::Reader (&out)[N]) {
  if (r.peek() != mp::Type::Map) fail(field, "expected a map");
  for_each_field(r, [&](std::string_view k, const mp::Reader& v) {
    for (size_t j = 0; j < N; ++j)
      if (k == keys[j]) out[j] = v;
  });
}

// The map's string keys, comma-separated ("empty" for none), for an error message.
std::string key_list(const mp::Reader& r) {
  std::string keys;
  for_each_field(r, [&keys](std::string_view k, const mp::Reader&) {
    keys += (keys.empty() ? "" : ",") + std::string(k.substr(0, 40));
  });
  return keys.empty() ? "empty" : keys;
}

// An integer; a float holding an integral value in range counts as one (JavaScript encoders write
// integers above 2^32 as float64).
WireInt wire_int(mp::Reader r, const std::string& field) {
  const mp::Type t = r.peek();
  mp::Reader f = r;
  double d;
  if (t == mp::Type::Float && f.read_number(d) && d == std::floor(d) && d >= -0x1p63 && d < 0x1p64)
    return d < 0 ? WireInt{static_cast<uint64_t>(static_cast<int64_t>(d)), true}
                 : WireInt{static_cast<uint64_t>(d), false};
  int64_t v;
  if (t == mp::Type::Float || r.remaining() == 0 || !r.read_hash(v))
    fail(field, std::string("expected an integer, got ") + kind_of(r));
  return {static_cast<uint64_t>(v), t == mp::Type::Int && v < 0};
}

uint32_t array_of(mp::Reader& r, const std::string& field) {
  uint32_t n;
  if (r.peek() != mp::Type::Array || !r.read_array(n)) fail(field, "expected an array");
  return n;
}

void stored(const mp::Reader& v, const std::string& field, Record& rec, Frame& f) {
  static const char* const keys[] = {"parent_hash", "blocks"};
  mp::Reader got[2];
  map_fields(v, field, keys, got);
  if (!absent(got[0])) {
    rec.has_parent = true;
    rec.parent = static_cast<int64_t>(wire_int(got[0], field + ".parent_hash").bits);
  }
  mp::Reader blocks = got[1];
  const uint32_t n = array_of(blocks, field + ".blocks");
  rec.begin = static_cast<uint32_t>(f.blocks.size());
  for (uint32_t i = 0; i < n; ++i) {
    const std::string at = field + ".blocks[" + std::to_string(i) + "]";
    mp::Reader b;
    blocks.take(b, kMaxDepth);
    static const char* const block_keys[] = {"block_hash", "tokens_hash"};
    mp::Reader bf[2];
    map_fields(b, at, block_keys, bf);
    const WireInt h = wire_int(bf[0], at + ".block_hash");
    const WireInt t = wire_int(bf[1], at + ".tokens_hash");
    f.blocks.push_back({static_cast<int64_t>(h.bits), t.bits});
  }
  rec.end = static_cast<uint32_t>(f.blocks.size());
}

void removed(const mp::Reader& v, const std::string& field, Record& rec, Frame& f) {
  static const char* const keys[] = {"block_hashes"};
  mp::Reader got[1];
  map_fields(v, field, keys, got);
  mp::Reader hashes = got[0];
  const uint32_t n = array_of(hashes, field + ".block_hashes");
  rec.begin = static_cast<uint32_t>(f.hashes.size());
  for (uint32_t i = 0; i < n; ++i) {
    mp::Reader h;
    hashes.take(h, kMaxDepth);
    f.hashes.push_back(static_cast<int64_t>(wire_int(h, field + ".block_hashes[" + std::to_string(i) + "]").bits));
  }
  rec.end = static_cast<uint32_t>(f.hashes.size());
}

void event_data(mp::Reader v, const std::string& field, Record& rec, Frame& f) {
  std::string_view s;
  mp::Reader probe = v;
  if (probe.peek() == mp::Type::Str && probe.read_str(s) && (s == "cleared" || s == "Cleared")) {
    rec.kind = kCleared;
    return;
  }
  static const char* const keys[] = {"cleared", "stored", "removed"};
  mp::Reader got[3];
  map_fields(v, field, keys, got);
  if (got[0].remaining()) {
    rec.kind = kCleared;
  } else if (got[1].remaining()) {
    rec.kind = kStored;
    stored(got[1], field + ".stored", rec, f);
  } else if (got[2].remaining()) {
    rec.kind = kRemoved;
    removed(got[2], field + ".removed", rec, f);
  } else {
    fail(field, "unknown event kind (" + key_list(v) + ")");
  }
}

void record(const mp::Reader& v, uint32_t index, Frame& f) {
  const std::string at = "payload[" + std::to_string(index) + "]";
  static const char* const keys[] = {"worker_id", "storage_tier", "dp_rank", "event"};
  mp::Reader got[4];
  map_fields(v, at, keys, got);
  Record rec;
  rec.storage_tier = "device";
  if (!absent(got[1]) && !got[1].read_str(rec.storage_tier)) fail(at + ".storage_tier", "expected a string");
  if (!tier_of_storage(rec.storage_tier, rec.tier))
    fail(at + ".storage_tier", "unknown tier '" + std::string(rec.storage_tier.substr(0, 40)) + "'");
  static const char* const event_keys[] = {"event_id", "data"};
  mp::Reader ev[2];
  map_fields(got[3], at + ".event", event_keys, ev);
  rec.worker_id = wire_int(got[0], at + ".worker_id").bits;
  if (!absent(got[2])) {
    const WireInt dp = wire_int(got[2], at + ".dp_rank");
    if (!dp.negative && dp.bits > static_cast<uint64_t>(INT64_MAX)) fail(at + ".dp_rank", "out of range");
    rec.dp_rank = static_cast<int64_t>(dp.bits);
  }
  rec.event_id = wire_int(ev[0], at + ".event.event_id");
  event_data(ev[1], at + ".event.data", rec, f);
  f.records.push_back(rec);
}

void decode(const uint8_t* data, size_t size, Frame& f) {
  if (size < 5) fail("frame", "envelope of " + std::to_string(size) + " bytes");
  if (data[0] != kEnvelopeVersion)
    fail("frame",
         "envelope version " + std::to_string(data[0]) + " (expected " + std::to_string(kEnvelopeVersion) + ")");
  const uint32_t n = (uint32_t(data[1]) << 24) | (uint32_t(data[2]) << 16) | (uint32_t(data[3]) << 8) | data[4];
  if (n != size - 5) fail("frame", "envelope says " + std::to_string(n) + " bytes, has " + std::to_string(size - 5));
  const mp::Reader envelope = whole_value(data + 5, n, "envelope");
  static const char* const keys[] = {"publisher_id", "sequence", "payload"};
  mp::Reader got[3];
  map_fields(envelope, "envelope", keys, got);
  std::string_view payload;
  if (got[2].peek() != mp::Type::Bin || !got[2].read_bin(payload)) fail("envelope.payload", "expected bytes");
  mp::Reader records = whole_value(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), "payload");
  f.publisher_id = wire_int(got[0], "envelope.publisher_id");
  f.sequence = wire_int(got[1], "envelope.sequence");
  const uint32_t count = array_of(records, "payload");
  for (uint32_t i = 0; i < count; ++i) {
    mp::Reader v;
    records.take(v, kMaxDepth);
    record(v, i, f);
  }
}

}  // namespace

void Frame::clear() {
  publisher_id = sequence = WireInt();
  records.clear();
  blocks.clear();
  hashes.clear();
  error_field.clear();
  error_text.clear();
}

bool tier_of_storage(std::string_view name, uint8_t& tier) {
  static constexpr std::string_view kHostPinned = "host_pinned";
  bool host_pinned = name.size() == kHostPinned.size();
  for (size_t i = 0; host_pinned && i < name.size(); ++i)
    host_pinned = (name[i] >= 'A' && name[i] <= 'Z' ? name[i] - 'A' + 'a' : name[i]) == kHostPinned[i];
  if (host_pinned) {
    tier = kCpuPinned;
    return true;
  }
  // device, disk and external are medium names too.
  return tier_of_medium(name, tier);
}

bool decode_envelope(const uint8_t* data, size_t size, Frame& f) {
  f.clear();
  try {
    decode(data, size, f);
    return true;
  } catch (Fail& x) {
    f.clear();
    f.error_field = std::move(x.field);
    f.error_text = std::move(x.text);
    return false;
  }
}

}  // namespace kv::events::dynamo

// Engine-neutral KV-event batches decoded from msgpack: what every engine adapter produces and
// what the index applies. Decoding validates each event completely before appending it, so a bad
// event is reported (index, kind, reason) and contributes nothing; a bad batch yields an error
// and no events at all.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared_tables.h"

namespace kv::events {

enum Kind : uint8_t { KV_EVENT_KINDS(KV_TABLE_ENUM) };

// Storage tiers in Dynamo's query order (device first): shared_tables.h.
enum Tier : uint8_t { KV_TIERS(KV_TABLE_ENUM) };
constexpr int kTiers = 0 KV_TIERS(KV_TABLE_COUNT);

// Why an event was refused (shared_tables.h); counted per worker and kind by the index.
enum class BadKind : uint8_t { KV_BAD_EVENT_KINDS(KV_TABLE_ENUM) Count };
const char* bad_kind_name(BadKind k);

// Why a whole batch was refused.
enum class BatchError : uint8_t { KV_BATCH_ERRORS(KV_TABLE_ENUM) Count };
const char* batch_error_name(BatchError e);

struct OptStr {
  bool present = false;
  std::string_view value;  // a view into the payload
};

struct Event {
  Kind kind = kCleared;
  uint8_t tier = kGpu;
  bool has_parent = false;
  bool bigram = false;
  int32_t block_size = 0;
  int64_t parent = 0;
  uint32_t hash_begin = 0, hash_end = 0;  // into Batch::hashes
  uint32_t tok_begin = 0, tok_end = 0;    // into Batch::tokens (empty unless tokens were asked for)
  uint32_t units = 0;                     // token units on the wire (bigram: pairs)
  OptStr medium, cache_salt, session_id, lora_name;
  bool has_lora_id = false;
  int64_t lora_id = 0;
};

struct BadEvent {
  uint32_t index;  // position in the batch's wire array
  BadKind kind;
  std::string reason;
};

// Bounds checked before anything is allocated for a batch.
struct Limits {
  size_t max_bytes = 64u << 20;    // payload size
  uint32_t max_events = 1u << 16;  // events in one batch
  int max_depth = 16;              // msgpack nesting inside one event
  // SGLang's BlockStored through the fast path (sglang_stored.h); off, every event goes through
  // the adapters (tests compare the two).
  bool fast_path = true;
};

struct Batch {
  double ts = 0;
  bool has_dp = false;
  int64_t dp = 0;
  bool map_form = false;
  std::vector<Event> events;
  std::vector<int64_t> hashes;
  std::vector<uint32_t> tokens;  // raw wire units; bigram pairs flattened (2 per unit)
  std::vector<BadEvent> bad;
  BatchError error = BatchError::None;
  std::string error_text;

  void clear();
};

// Told each good event's block hashes as soon as the event is decoded, while the rest of the
// payload still is: a consumer that looks the hashes up (an index) can request their memory then,
// and the misses overlap with decoding instead of coming after it. A batch refused later as a
// whole was still announced up to there, so a sink may only prepare, never apply.
struct HashSink {
  void (*seen)(void* ctx, const int64_t* hashes, size_t n);
  void* ctx;
};

// Decodes one msgpack payload. Returns false (and fills error / error_text) for a batch that is
// refused as a whole; bad events are listed in `bad` and left out of `events`.
bool decode_batch(const uint8_t* data, size_t size, const Limits& limits, bool want_tokens, Batch& out,
                  const HashSink* sink = nullptr);

// Dynamo's StorageTier::from_kv_medium (absent/empty -> GPU); false for an unknown medium.
bool tier_of_medium(std::string_view medium, uint8_t& tier);

}  // namespace kv::events

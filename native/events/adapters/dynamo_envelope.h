// Dynamo's KV-event plane (topic "kv-events"): the envelope frame of one ZMQ message, decoded with
// the same bounded msgpack reader as engine payloads. The frame is a version byte (1), a
// big-endian u32 length and a msgpack map {publisher_id, sequence, published_at, topic, payload},
// whose payload (bin) is a msgpack array of router events:
//   {worker_id, storage_tier, residency_domain, dp_rank,
//    event: {event_id, data: {stored: {parent_hash, blocks: [{block_hash, tokens_hash}]}}
//                          | {removed: {block_hashes}} | "cleared"}}
// `block_hash` is the engine's own hash passed through (for SGLang, its page hash chain);
// `tokens_hash` is Dynamo's xxh3 of the block's tokens. A frame decodes whole or not at all: the
// first bad field is reported by its dotted path and nothing of the frame is kept.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kv::events::dynamo {

enum DataKind : uint8_t { kStored, kRemoved, kCleared };

// An integer as Dynamo wrote it: 64 bits and whether the wire value was negative (a u64 above
// INT64_MAX and a negative i64 share their bits).
struct WireInt {
  uint64_t bits = 0;
  bool negative = false;
};

struct Block {
  int64_t block_hash;    // kvctl's key: the engine's hash as signed int64
  uint64_t tokens_hash;  // Dynamo's xxh3 of the block's tokens
};

struct Record {
  uint64_t worker_id = 0;
  int64_t dp_rank = 0;
  std::string_view storage_tier;  // as sent ("device" when absent); a view into the frame
  uint8_t tier = 0;               // kv::events::Tier
  WireInt event_id;
  DataKind kind = kCleared;
  bool has_parent = false;
  int64_t parent = 0;
  // Into Frame::blocks (stored) or Frame::hashes (removed); empty for cleared.
  uint32_t begin = 0, end = 0;
};

struct Frame {
  WireInt publisher_id, sequence;
  std::vector<Record> records;
  std::vector<Block> blocks;
  std::vector<int64_t> hashes;
  // Set when the frame is refused: the field's dotted path ("frame" for the framing) and why.
  std::string error_field, error_text;

  void clear();
};

// Dynamo's storage tiers onto kvctl's (device, host_pinned, then every medium name the engine
// decoder knows); false for an unknown name.
bool tier_of_storage(std::string_view name, uint8_t& tier);

// Decodes the envelope frame. False (error_field and error_text set, nothing else kept) when any
// part of it is malformed or of the wrong kind.
bool decode_envelope(const uint8_t* data, size_t size, Frame& out);

}  // namespace kv::events::dynamo

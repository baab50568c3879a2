// The tables the native code and TypeScript both read, written once: storage tiers, why an event
// or a batch is refused, and the layout of the counts the index writes into a caller's
// Float64Array. Each is an X-macro list: the C++ enums and name tables expand it, and
// scripts/gen-tables.ts reads the same lists to write src/native-tables.ts (`npm run lint`,
// check `generated`, fails when that file differs). Keep one entry per line: the generator reads
// `X(Identifier, "name")` / `X(identifier)` entries in order.
#pragma once

// What an event does, by its kind number in the decoded columns (named as the engines' tags).
#define KV_EVENT_KINDS(X)     \
  X(kStored, "BlockStored")   \
  X(kRemoved, "BlockRemoved") \
  X(kCleared, "AllBlocksCleared")

// Storage tiers in Dynamo's query order (device first).
#define KV_TIERS(X)           \
  X(kGpu, "GPU")              \
  X(kCpuPinned, "CPU_PINNED") \
  X(kDisk, "DISK")            \
  X(kExternal, "EXTERNAL")

// Why an event was refused; counted per worker and kind by the index. not_an_event: nil, a number,
// ... where an event should be; unknown_tag: no or unknown "type" / positional tag; fields: too few
// positional fields, wrong field types; hash: a non-integer hash in block_hashes /
// parent_block_hash; tokens: token_ids not uint32 (or bad bigram pairs); block_size: missing, zero,
// negative or oversized; medium: an unknown medium string.
#define KV_BAD_EVENT_KINDS(X)   \
  X(NotAnEvent, "not_an_event") \
  X(UnknownTag, "unknown_tag")  \
  X(Fields, "fields")           \
  X(Hash, "hash")               \
  X(Tokens, "tokens")           \
  X(BlockSize, "block_size")    \
  X(Medium, "medium")

// Why a whole batch was refused (None: it was not).
#define KV_BATCH_ERRORS(X) \
  X(None, "none")          \
  X(Msgpack, "msgpack")    \
  X(Shape, "shape")        \
  X(TooLarge, "too_large") \
  X(TooManyEvents, "too_many_events")

// One frame's counts (kv::index::ApplyCounts), in the order the index writes them; the frame's
// slots in the caller's Float64Array are these, then KV_FRAME_EXTRAS.
#define KV_APPLY_COUNTS(X) \
  X(events)                \
  X(stored_events)         \
  X(removed_events)        \
  X(cleared_events)        \
  X(stored_blocks)         \
  X(removed_blocks)        \
  X(added)                 \
  X(removed)               \
  X(unknown_removals)      \
  X(orphan_stores)         \
  X(hash_mismatches)       \
  X(verified)              \
  X(unverifiable)          \
  X(bad_events)

// After a frame's counts: the batch's timestamp and DP rank (NaN for none).
#define KV_FRAME_EXTRAS(X) \
  X(ts)                    \
  X(dp_rank)

// One worker's counters: blocks per tier (KV_TIERS order), bad events per kind
// (KV_BAD_EVENT_KINDS), refused batches per error (KV_BATCH_ERRORS), then these.
#define KV_WORKER_COUNTERS(X) \
  X(unknown_removals)         \
  X(orphan_stores)            \
  X(hash_mismatches)          \
  X(unverifiable)             \
  X(verified)

#define KV_TABLE_ENUM(id, name) id,
#define KV_TABLE_NAME(id, name) name,
#define KV_TABLE_COUNT(...) +1
#define KV_TABLE_COUNTER(id) uint64_t id = 0;

// Per-worker, per-tier index of KV blocks keyed by their 64-bit engine hash, fed by KV events.
//
// Block hashes are chained (a block's hash names its whole prefix), so the radix structure the
// scoring needs is the parent link each block keeps; a request's overlap is a walk over its own
// hashes. Each block is one record in an arena, [key, parent, meta, masks...], where masks hold
// 4 tier bits per worker, 16 workers a word. A record keeps its number for the block's life, and a
// worker's stored blocks get consecutive records, so a request walking a chain reads memory in
// order: block i+1 is looked for first in the record after block i's, then in block i's child hint
// (the record of the last block stored with it as parent), and only then through the hash index.
// The index is open addressing over 8-byte entries, (fingerprint << 32) | record + 1, linear
// probing with backward-shift deletion: eight entries a cache line, and a probe run compares
// fingerprints without touching records.
//
// With verification on, each BlockStored's hashes are recomputed from its token ids (SGLang's
// page chain, SHA-256) from the parent's digest; the token-derived hash and digest are kept beside
// the engine hash (dual key), and mismatches are counted.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "event_batch.h"
#include "page_message.h"

namespace kv::index {

struct Options {
  bool verify = false;
  int shared_tier = events::kExternal;  // tier counted as the shared pool; -1: none
  uint64_t expected_blocks = 0;
  events::Limits limits;
};

// What one apply did (summed over a frame's events).
// On the wire: stored_blocks, removed_blocks; the rest is what the index did (shared_tables.h).
struct ApplyCounts {
  KV_APPLY_COUNTS(KV_TABLE_COUNTER)
};

struct WorkerStats {
  uint64_t tier_blocks[events::kTiers] = {};
  uint64_t bad_events[static_cast<size_t>(events::BadKind::Count)] = {};
  uint64_t bad_batches[static_cast<size_t>(events::BatchError::Count)] = {};
  KV_WORKER_COUNTERS(KV_TABLE_COUNTER)
};

struct LookupResult {
  bool found = false;
  int64_t hash = 0;
  bool has_parent = false;
  int64_t parent = 0;
  bool has_token_hash = false;
  int64_t token_hash = 0;
  std::vector<uint8_t> masks;  // per worker slot
};

// Overlap of one request: per worker slot, per-tier prefix lengths and Dynamo's tier-exclusive
// continuation, plus the positions the shared tier holds.
struct Overlap {
  uint32_t request_blocks = 0;
  uint32_t workers = 0;
  std::vector<int32_t> per_tier;  // workers x 4
  std::vector<int32_t> tiered;    // workers x 4
  std::vector<std::pair<int32_t, int32_t>> shared_ranges;
  int32_t shared_hits = 0;
  // Scratch reused across queries by whoever owns this Overlap.
  std::vector<uint64_t> masks;       // per request block: its mask words
  std::vector<uint64_t> alive, cur;  // per mask word: tiers still unbroken, current stage (one-hot)
  std::vector<int32_t> run_start;    // per worker: where its current stage began
};

// Dynamo's DefaultWorkerScorer inputs (see src/index/scoring.ts for the formula).
struct ScoringConfig {
  double overlap_score_credit = 1.0, overlap_score_credit_decay = 0.0, prefill_load_scale = 1.0;
  double host_cache_hit_weight = 0.75, disk_cache_hit_weight = 0.25, shared_cache_multiplier = 0.0;
  double decode_active_request_weight = 0.0;
  bool track_prefill_tokens = true, external_as_disk = false;
};
struct WorkerLoad {
  double active_prefill_tokens = 0, decode_blocks = 0, active_requests = 0;
  bool decode_only = false;
};
struct WorkerScore {
  double logit, credit, device, host, disk, shared_beyond;
};

class BlockIndex {
 public:
  explicit BlockIndex(const Options& o = {});
  ~BlockIndex();
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;

  // Decodes a payload, verifies (when on) and applies every valid event; bad events are
  // counted and skipped whole. Returns false when the batch as a whole was refused. With
  // `want_tokens` the last batch keeps the token ids even when verification is off.
  bool apply_frame(uint32_t worker, const uint8_t* data, size_t size, ApplyCounts& c, bool want_tokens = false);
  // The decoded batch of the last apply_frame (its bad events and batch error).
  const events::Batch& last_batch() const { return batch_; }

  // Frames of several workers (a consumer's event-loop turn), applied as apply_frame would
  // apply them one after the other: ok[i] and counts[i] per frame, frame_batch(i) its batch.
  // With verification on, the chains of two frames that cannot affect each other (other
  // workers, no block in common) are hashed together in two SHA lanes.
  struct FrameIn {
    uint32_t worker;
    const uint8_t* data;
    size_t size;
  };
  void apply_frames(const FrameIn* frames, size_t k, ApplyCounts* counts, bool* ok);
  const events::Batch& frame_batch(size_t i) const { return frames_[i].batch; }

  void store(uint32_t worker, uint8_t tier, const int64_t* hashes, size_t n, bool has_parent, int64_t parent,
             ApplyCounts& c);
  void remove(uint32_t worker, uint8_t tier, const int64_t* hashes, size_t n, ApplyCounts& c);
  uint64_t clear(uint32_t worker);

  void overlap(const int64_t* hashes, size_t n, Overlap& out) const;
  void score(const Overlap& o, const uint32_t* candidates, size_t nc, double block_size, const WorkerLoad* loads,
             const ScoringConfig& cfg, WorkerScore* out) const;
  LookupResult lookup(int64_t hash) const;

  uint64_t blocks() const { return live_; }
  uint32_t worker_slots() const { return nworkers_; }
  const WorkerStats& worker_stats(uint32_t w) const;
  // Bytes held by the table and the dual-key records.
  size_t memory_bytes() const;
  uint64_t capacity() const { return icap_; }

 private:
  // meta: bit 0 live, bit 1 has parent, bits 2..31 child hint (record + 1, 0: none), 32..63 dual.
  static constexpr uint64_t kLive = 1, kHasParent = 2, kChildMask = 0xfffffffcULL;
  static constexpr uint64_t kMaxRecords = (uint64_t(1) << 30) - 2;  // a child hint holds record + 1
  static constexpr uint32_t kNone = 0xffffffffu;
  size_t stride() const { return 3 + groups_; }
  uint64_t* rec(uint64_t r) { return arena_ + r * stride(); }
  const uint64_t* rec(uint64_t r) const { return arena_ + r * stride(); }
  uint32_t child_of(const uint64_t* r) const { return static_cast<uint32_t>((r[2] & kChildMask) >> 2); }
  void set_child(uint64_t* r, uint32_t child) { r[2] = (r[2] & ~kChildMask) | (uint64_t(child + 1) << 2); }
  // Zeroed memory straight from the kernel (huge pages where the kernel allows: one TLB entry
  // covers 2 MiB on the request path), faulted in up front.
  static uint64_t* map_zeroed(size_t bytes);
  static void unmap(uint64_t* t, size_t bytes);
  static uint64_t mix(int64_t k) {
    uint64_t x = static_cast<uint64_t>(k);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
  }
  static uint32_t fingerprint(int64_t k) { return static_cast<uint32_t>(mix(k) >> 32); }
  void prefetch(int64_t key) const { __builtin_prefetch(index_ + (fingerprint(key) & imask_)); }
  uint32_t find(int64_t key) const;  // record or kNone
  // The key's record, inserted (with that parent) when absent: one probe run for both.
  uint32_t find_or_insert(int64_t key, bool has_parent, int64_t parent, uint32_t worker);
  // A record for a block `worker` stores: a given-back one, else the next of the worker's chunk.
  uint32_t new_record(uint32_t worker);
  void index_put(uint32_t fp, uint32_t r);
  // store() for a caller that knows the parent is held (no orphan count then).
  void store_run(uint32_t worker, uint8_t tier, const int64_t* hashes, size_t n, bool has_parent, int64_t parent,
                 bool parent_held, ApplyCounts& c);
  // A removal or a clear out of a frame (both event loops: one frame, and frames in SHA lanes).
  void apply_drop(uint32_t w, const events::Event& e, const int64_t* hashes, size_t n, ApplyCounts& c) {
    if (e.kind == events::kRemoved) {
      ++c.removed_events;
      c.removed_blocks += n;
      remove(w, e.tier, hashes + e.hash_begin, n, c);
    } else {
      ++c.cleared_events;
      c.removed += clear(w);
    }
  }
  void erase_record(uint32_t r);
  void grow_index(uint64_t icap);
  void grow_arena(uint64_t cap, uint32_t groups);
  void ensure_worker(uint32_t w);
  uint8_t mask_of(const uint64_t* s, uint32_t w) const {
    return static_cast<uint8_t>((s[3 + (w >> 4)] >> ((w & 15) * 4)) & 15);
  }
  void set_mask(uint64_t* s, uint32_t w, uint8_t m) {
    uint64_t& word = s[3 + (w >> 4)];
    const int sh = (w & 15) * 4;
    word = (word & ~(uint64_t(15) << sh)) | (uint64_t(m) << sh);
  }
  bool empty_masks(const uint64_t* s) const {
    for (uint32_t g = 0; g < groups_; ++g)
      if (s[3 + g]) return false;
    return true;
  }
  // Decodes a frame into `b` and counts what it refused; false when the batch is refused whole.
  bool decode_frame(uint32_t worker, const uint8_t* data, size_t size, events::Batch& b, ApplyCounts& c,
                    bool want_tokens);
  // A decoded frame's events, one after the other (apply_frame after decoding).
  void apply_events(uint32_t worker, const events::Batch& b, ApplyCounts& c);

  // A BlockStored whose chain is being recomputed: the chain's input and the digests so far.
  struct ChainJob {
    uint32_t worker = 0;
    const events::Event* e = nullptr;
    const int64_t* hashes = nullptr;
    size_t pages = 0;
    bool parent_held = false;
    ApplyCounts* c = nullptr;
    const uint32_t* tokens = nullptr;  // raw token ids (bigram pairs unpacked into `raw`)
    uint32_t page_size = 0;
    bool bigram = false;
    bool seeded = false;  // the first page chains from `prior`
    std::array<uint8_t, 32> prior{};
    std::vector<uint8_t> digests;  // 32 bytes a page
    std::vector<uint32_t> raw;
    PageMessage page(size_t p) const {
      return {p == 0 ? (seeded ? prior.data() : nullptr) : digests.data() + 32 * (p - 1), tokens + p * page_size,
              page_size, bigram};
    }
  };
  // Everything store_verified does before hashing: true with `job` ready to hash, or false when
  // the event was stored as unverifiable.
  bool begin_verified(uint32_t worker, const events::Event& e, const events::Batch& b, bool parent_held, ApplyCounts& c,
                      ChainJob& job);
  // After every page is hashed: the blocks stored, their dual keys set, mismatches counted.
  void finish_verified(ChainJob& job);
  void store_verified(uint32_t worker, const events::Event& e, const events::Batch& b, bool parent_held,
                      ApplyCounts& c);
  uint32_t new_dual(int64_t token_hash, const uint8_t* digest);
  // by_token_hash_ changes, in order; while two frames run in lanes, the later frame's are held
  // back in `token_ops_` until the earlier one is done, so they land in frame order.
  void set_token_key(int64_t token_hash, int64_t hash);
  void erase_token_key(int64_t token_hash);
  struct TokenOp {
    bool erase;
    int64_t token_hash, hash;
  };
  std::vector<TokenOp>* token_ops_ = nullptr;

  Options opt_;
  uint64_t* index_ = nullptr;  // icap_ entries
  size_t index_bytes_ = 0;
  uint64_t icap_ = 0, imask_ = 0, live_ = 0;
  uint64_t* arena_ = nullptr;  // cap_ records of stride() words; top_ of them handed out
  size_t arena_bytes_ = 0;
  uint64_t cap_ = 0, top_ = 0;
  std::vector<uint32_t> free_;  // records given back, reused before the arena grows
  // Each worker's new blocks go to its own chunk of the arena: a worker's successive events mostly
  // continue one chain (a request's prefill in chunks, its decode), so the chain stays in order in
  // memory even when other workers' events come in between.
  static constexpr uint64_t kChunk = 4096;
  struct Chunk {
    uint64_t next = 0, end = 0, size = 0;
  };
  std::vector<Chunk> chunks_;
  std::vector<uint32_t> run_;   // store_run: the record of each block of the last run
  uint32_t groups_ = 1, nworkers_ = 0;
  std::vector<WorkerStats> stats_;
  // Dual key (verification on): records by index + 1 in a slot's meta, a free list, and the
  // engine hash of every token hash that differs from it.
  struct Dual {
    int64_t token_hash;
    std::array<uint8_t, 32> digest;
  };
  std::vector<Dual> dual_;
  std::vector<uint32_t> dual_free_;
  std::unordered_map<int64_t, int64_t> by_token_hash_;
  events::Batch batch_;
  ChainJob job_, lane_jobs_[2];
  // apply_frames: each frame's batch; per lane, the hashes its frame names (to pair frames).
  struct Frame {
    events::Batch batch;
  };
  std::vector<Frame> frames_;
  struct KeySet {
    std::vector<int64_t> keys;
    std::vector<uint32_t> stamp;  // slot in use when it equals `now` (no clearing between frames)
    uint32_t now = 0;
    uint64_t mask = 0;
    void reset(size_t n);
    void add(int64_t k);
    bool has(int64_t k) const;
  };
  // One frame in progress on a lane: its next event, and whether a chain is being hashed.
  struct Lane {
    long frame = -1;  // -1: idle
    size_t event = 0;
    bool held = false;  // as in apply_events
    int64_t held_hash = 0;
    bool hashing = false;
    size_t page = 0;
    std::vector<TokenOp> ops;  // token-hash map changes held back (the later frame)
    KeySet keys;               // the hashes the frame's events name
    bool clears = false;       // the frame has an AllBlocksCleared
  };
  Lane lanes_[2];
  bool independent(const Lane& running, Lane& candidate, const FrameIn* in) const;
};

}  // namespace kv::index

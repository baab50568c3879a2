#include "block_index.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "sglang_chain.h"
#include "sglang_namespace.h"
#include "sha256.h"

namespace kv::index {

using events::Batch;
using events::Event;

BlockIndex::BlockIndex(const Options& o) : opt_(o) {
  uint64_t icap = 1 << 8;
  while (icap * 7 < o.expected_blocks * 10) icap *= 2;  // <= 70% full at the expected size
  grow_index(icap);
  // Room for the expected blocks and a partly filled chunk for each of 64 workers (or one chunk,
  // growing from there, when no size is given).
  grow_arena(std::min(o.expected_blocks ? o.expected_blocks + 64 * kChunk : kChunk, kMaxRecords), 1);
  // Verified blocks each get a dual-key record: sized up front, so filling it never copies it.
  if (o.verify) dual_.reserve(std::min(o.expected_blocks, kMaxRecords));
}

BlockIndex::~BlockIndex() {
  unmap(index_, index_bytes_);
  unmap(arena_, arena_bytes_);
}

uint64_t* BlockIndex::map_zeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (bytes >= (size_t(2) << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  // Fault it all in now, in one call: hashed inserts land all over the index, so within the
  // first few thousand blocks nearly every page is touched anyway, each touch a page fault taken
  // on the event path. A kernel without it (before 5.14) faults pages in as they are touched.
  madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
  return static_cast<uint64_t*>(p);
}

void BlockIndex::unmap(uint64_t* t, size_t bytes) {
  if (t) munmap(t, bytes);
}

void BlockIndex::index_put(uint32_t fp, uint32_t r) {
  uint64_t i = fp & imask_;
  while (index_[i]) i = (i + 1) & imask_;
  index_[i] = (uint64_t(fp) << 32) | (uint64_t(r) + 1);
}

void BlockIndex::grow_index(uint64_t icap) {
  unmap(index_, index_bytes_);
  index_bytes_ = icap * 8;
  index_ = map_zeroed(index_bytes_);
  icap_ = icap;
  imask_ = icap - 1;
  for (uint64_t r = 0; r < top_; ++r) {
    const uint64_t* x = rec(r);
    if (x[2] & kLive) index_put(fingerprint(static_cast<int64_t>(x[0])), static_cast<uint32_t>(r));
  }
}

void BlockIndex::grow_arena(uint64_t cap, uint32_t groups) {
  uint64_t* old = arena_;
  const size_t old_bytes = arena_bytes_, old_stride = stride();
  arena_bytes_ = cap * (3 + groups) * 8;
  arena_ = map_zeroed(arena_bytes_);
  groups_ = groups;
  cap_ = cap;
  for (uint64_t r = 0; r < top_; ++r) std::memcpy(rec(r), old + r * old_stride, old_stride * 8);
  unmap(old, old_bytes);
}

void BlockIndex::ensure_worker(uint32_t w) {
  if (w < nworkers_) return;
  nworkers_ = w + 1;
  stats_.resize(nworkers_);
  chunks_.resize(nworkers_);
  if (w >= 16 * groups_) grow_arena(cap_, (w >> 4) + 1);
}

const WorkerStats& BlockIndex::worker_stats(uint32_t w) const {
  static const WorkerStats none{};
  return w < nworkers_ ? stats_[w] : none;
}

uint32_t BlockIndex::find(int64_t key) const {
  const uint32_t fp = fingerprint(key);
  for (uint64_t i = fp & imask_;; i = (i + 1) & imask_) {
    const uint64_t v = index_[i];
    if (!v) return kNone;
    if (static_cast<uint32_t>(v >> 32) == fp) {
      const uint32_t r = static_cast<uint32_t>(v) - 1;
      if (static_cast<int64_t>(rec(r)[0]) == key) return r;
    }
  }
}

uint32_t BlockIndex::new_record(uint32_t w) {
  if (!free_.empty()) {
    const uint32_t r = free_.back();
    free_.pop_back();
    return r;
  }
  Chunk& k = chunks_[w];
  if (k.next == k.end) {
    // A worker's chunks double up to kChunk: one that stores little holds little.
    k.size = std::min<uint64_t>(std::max<uint64_t>(2 * k.size, 64), kChunk);
    if (top_ + k.size > cap_) {
      if (top_ + k.size > kMaxRecords) throw std::bad_alloc();
      grow_arena(std::min<uint64_t>(std::max(cap_ * 2, top_ + k.size), kMaxRecords), groups_);
    }
    k.next = top_;
    k.end = top_ += k.size;
  }
  return static_cast<uint32_t>(k.next++);
}

uint32_t BlockIndex::find_or_insert(int64_t key, bool has_parent, int64_t parent, uint32_t w) {
  const uint32_t fp = fingerprint(key);
  uint64_t i = fp & imask_;
  for (;; i = (i + 1) & imask_) {
    const uint64_t v = index_[i];
    if (!v) break;
    if (static_cast<uint32_t>(v >> 32) == fp) {
      const uint32_t r = static_cast<uint32_t>(v) - 1;
      if (static_cast<int64_t>(rec(r)[0]) == key) return r;
    }
  }
  const uint32_t r = new_record(w);
  uint64_t* x = rec(r);
  x[0] = static_cast<uint64_t>(key);
  x[1] = static_cast<uint64_t>(parent);
  x[2] = kLive | (has_parent ? kHasParent : 0);
  for (uint32_t g = 0; g < groups_; ++g) x[3 + g] = 0;
  ++live_;
  // `i` is the empty entry ending the probe run, unless the index has to grow first.
  if (live_ * 10 > icap_ * 7) grow_index(icap_ * 2);  // puts r (live now) in with the rest
  else index_[i] = (uint64_t(fp) << 32) | (uint64_t(r) + 1);
  return r;
}

void BlockIndex::erase_record(uint32_t r) {
  uint64_t* x = rec(r);
  const uint32_t d = static_cast<uint32_t>(x[2] >> 32);
  if (d) {
    const int64_t th = dual_[d - 1].token_hash;
    if (th != static_cast<int64_t>(x[0])) erase_token_key(th);
    dual_free_.push_back(d - 1);
  }
  uint64_t i = fingerprint(static_cast<int64_t>(x[0])) & imask_;
  while (static_cast<uint32_t>(index_[i]) != r + 1) i = (i + 1) & imask_;
  // Backward-shift deletion: pull later members of the probe run into the hole; an entry's home
  // is its fingerprint's low bits, so no record is read.
  uint64_t hole = i, j = i;
  for (;;) {
    j = (j + 1) & imask_;
    const uint64_t v = index_[j];
    if (!v) break;
    const uint64_t home = (v >> 32) & imask_;
    // v may move to the hole unless its home lies cyclically in (hole, j].
    const bool in_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (in_between) continue;
    index_[hole] = v;
    hole = j;
  }
  index_[hole] = 0;
  // Dead records keep nothing a walk could match (holds() checks kLive).
  std::memset(x, 0, stride() * 8);
  free_.push_back(r);
  --live_;
}

uint32_t BlockIndex::new_dual(int64_t token_hash, const uint8_t* digest) {
  uint32_t k;
  if (!dual_free_.empty()) {
    k = dual_free_.back();
    dual_free_.pop_back();
  } else {
    k = static_cast<uint32_t>(dual_.size());
    dual_.push_back({});
  }
  dual_[k].token_hash = token_hash;
  std::memcpy(dual_[k].digest.data(), digest, 32);
  return k + 1;
}

void BlockIndex::store(uint32_t w, uint8_t tier, const int64_t* hashes, size_t n, bool has_parent, int64_t parent,
                       ApplyCounts& c) {
  store_run(w, tier, hashes, n, has_parent, parent, false, c);
}

void BlockIndex::store_run(uint32_t w, uint8_t tier, const int64_t* hashes, size_t n, bool has_parent, int64_t parent,
                           bool parent_held, ApplyCounts& c) {
  ensure_worker(w);
  WorkerStats& ws = stats_[w];
  uint32_t prev = kNone;  // the record of the block before, for its child hint
  if (has_parent) {
    // A chain stored over several events continues from the last block the run before stored:
    // that record, if it still holds the parent, saves the probe.
    const uint32_t last = run_.empty() ? kNone : run_.back();
    const uint64_t* lx = last == kNone ? nullptr : rec(last);
    prev = lx && (lx[2] & kLive) && static_cast<int64_t>(lx[0]) == parent ? last : find(parent);
    if (prev == kNone && !parent_held) {
      ++c.orphan_stores;
      ++ws.orphan_stores;
    }
  }
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  bool hp = has_parent;
  int64_t p = parent;
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < n && i < kAhead; ++i) prefetch(hashes[i]);
  run_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) prefetch(hashes[i + kAhead]);
    const uint32_t r = find_or_insert(hashes[i], hp, p, w);
    run_[i] = r;
    uint64_t* x = rec(r);
    const uint8_t m = mask_of(x, w);
    if (!(m & bit)) {
      set_mask(x, w, m | bit);
      ++ws.tier_blocks[tier];
      ++c.added;
    }
    // A walk looks for a block's child in the next record first, then in the child hint.
    if (prev != kNone && r != prev + 1) {
      uint64_t* px = rec(prev);
      if (child_of(px) != r + 1) set_child(px, r);
    }
    prev = r;
    hp = true;
    p = hashes[i];
  }
}

void BlockIndex::remove(uint32_t w, uint8_t tier, const int64_t* hashes, size_t n, ApplyCounts& c) {
  ensure_worker(w);
  WorkerStats& ws = stats_[w];
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = find(hashes[i]);
    uint64_t* x = r == kNone ? nullptr : rec(r);
    const uint8_t m = x ? mask_of(x, w) : 0;
    if (!(m & bit)) {
      ++c.unknown_removals;
      ++ws.unknown_removals;
      continue;
    }
    set_mask(x, w, m & ~bit);
    --ws.tier_blocks[tier];
    ++c.removed;
    if (empty_masks(x)) erase_record(r);
  }
}

uint64_t BlockIndex::clear(uint32_t w) {
  if (w >= nworkers_) return 0;
  uint64_t removed = 0;
  // Records never move, so blocks can be erased during the scan.
  for (uint64_t r = 0; r < top_; ++r) {
    uint64_t* x = rec(r);
    if (!(x[2] & kLive)) continue;
    const uint8_t m = mask_of(x, w);
    if (!m) continue;
    removed += static_cast<uint64_t>(__builtin_popcount(m));
    set_mask(x, w, 0);
    if (empty_masks(x)) erase_record(static_cast<uint32_t>(r));
  }
  std::fill(std::begin(stats_[w].tier_blocks), std::end(stats_[w].tier_blocks), 0);
  return removed;
}

void BlockIndex::set_token_key(int64_t token_hash, int64_t hash) {
  if (token_ops_) token_ops_->push_back({false, token_hash, hash});
  else by_token_hash_[token_hash] = hash;
}

void BlockIndex::erase_token_key(int64_t token_hash) {
  if (token_ops_) token_ops_->push_back({true, token_hash, 0});
  else by_token_hash_.erase(token_hash);
}

bool BlockIndex::begin_verified(uint32_t w, const Event& e, const Batch& b, bool parent_held, ApplyCounts& c,
                                ChainJob& job) {
  const int64_t* hs = b.hashes.data() + e.hash_begin;
  const size_t n = e.hash_end - e.hash_begin;
  job.seeded = false;
  bool ok = !e.lora_name.present && uint64_t(e.units) == uint64_t(n) * uint64_t(e.block_size) && n > 0;
  if (ok && e.has_parent) {
    const uint32_t at = find(e.parent);
    const uint32_t d = at == kNone ? 0 : static_cast<uint32_t>(rec(at)[2] >> 32);
    // Copied: dual_ may grow (and move) while the chain is hashed beside another.
    if (d) job.prior = dual_[d - 1].digest, job.seeded = true;
    else ok = false;  // the parent's digest is unknown: the chain cannot be recomputed
  } else if (ok && e.cache_salt.present && !e.cache_salt.value.empty()) {
    job.prior = cache_salt_seed(std::string(e.cache_salt.value));
    job.seeded = true;
  }
  const uint32_t* tokens = b.tokens.data() + e.tok_begin;
  uint64_t raw = e.units;
  if (ok && e.bigram) {
    // Pairs (t_i, t_i+1) -> the raw sequence t_0..t_N the chain reads.
    job.raw.resize(e.units + 1);
    for (uint32_t i = 0; i < e.units; ++i) job.raw[i] = tokens[2 * i];
    job.raw[e.units] = tokens[2 * e.units - 1];
    tokens = job.raw.data();
    raw = e.units + 1;
  }
  if (!ok || sglang_full_pages(raw, static_cast<uint32_t>(e.block_size), e.bigram) != n) {
    ++c.unverifiable;
    ++stats_[w].unverifiable;
    store_run(w, e.tier, hs, n, e.has_parent, e.parent, parent_held, c);
    return false;
  }
  job.worker = w;
  job.e = &e;
  job.hashes = hs;
  job.pages = n;
  job.parent_held = parent_held;
  job.c = &c;
  job.tokens = tokens;
  job.page_size = static_cast<uint32_t>(e.block_size);
  job.bigram = e.bigram;
  job.digests.resize(32 * n);
  return true;
}

void BlockIndex::finish_verified(ChainJob& job) {
  const uint32_t w = job.worker;
  const Event& e = *job.e;
  const int64_t* hs = job.hashes;
  const size_t n = job.pages;
  ApplyCounts& c = *job.c;
  store_run(w, e.tier, hs, n, e.has_parent, e.parent, job.parent_held, c);
  c.verified += n;
  stats_[w].verified += n;
  for (size_t i = 0; i < n; ++i) {
    uint64_t* s = rec(run_[i]);  // store_run's records, in order
    if (s[2] >> 32) continue;  // already has its dual key
    const uint8_t* d = job.digests.data() + 32 * i;
    const int64_t th = digest_to_int64(d);
    s[2] |= uint64_t(new_dual(th, d)) << 32;
    if (th != hs[i]) {
      ++c.hash_mismatches;
      ++stats_[w].hash_mismatches;
      set_token_key(th, hs[i]);
    }
  }
}

void BlockIndex::store_verified(uint32_t w, const Event& e, const Batch& b, bool parent_held, ApplyCounts& c) {
  if (!begin_verified(w, e, b, parent_held, c, job_)) return;
  for (size_t p = 0; p < job_.pages; ++p) sha256_page_digest(job_.page(p), job_.digests.data() + 32 * p);
  finish_verified(job_);
}

bool BlockIndex::decode_frame(uint32_t w, const uint8_t* data, size_t size, Batch& b, ApplyCounts& c,
                              bool want_tokens) {
  ensure_worker(w);
  // Each event's index entries are requested as soon as its hashes are read: the misses (a
  // frame's blocks land all over the table) overlap with decoding the rest of the frame.
  const events::HashSink sink{[](void* self, const int64_t* h, size_t n) {
                                for (size_t i = 0; i < n; ++i) static_cast<const BlockIndex*>(self)->prefetch(h[i]);
                              },
                              this};
  if (!events::decode_batch(data, size, opt_.limits, opt_.verify || want_tokens, b, &sink)) {
    ++stats_[w].bad_batches[static_cast<size_t>(b.error)];
    return false;
  }
  for (const auto& x : b.bad) ++stats_[w].bad_events[static_cast<size_t>(x.kind)];
  c.bad_events += b.bad.size();
  return true;
}

bool BlockIndex::apply_frame(uint32_t w, const uint8_t* data, size_t size, ApplyCounts& c, bool want_tokens) {
  if (!decode_frame(w, data, size, batch_, c, want_tokens)) return false;
  apply_events(w, batch_, c);
  return true;
}

void BlockIndex::apply_events(uint32_t w, const Batch& b, ApplyCounts& c) {
  const int64_t* hashes = b.hashes.data();
  // The last block the previous event stored: present in the table (nothing ran in between), so
  // an event that chains from it needs no orphan probe.
  bool held = false;
  int64_t held_hash = 0;
  for (const Event& e : b.events) {
    ++c.events;
    const size_t n = e.hash_end - e.hash_begin;
    const bool parent_held = held && e.has_parent && e.parent == held_hash;
    held = false;
    switch (e.kind) {
      case events::kStored:
        ++c.stored_events;
        c.stored_blocks += n;
        if (opt_.verify) store_verified(w, e, b, parent_held, c);
        else store_run(w, e.tier, hashes + e.hash_begin, n, e.has_parent, e.parent, parent_held, c);
        if (n) {
          held = true;
          held_hash = hashes[e.hash_end - 1];
        }
        break;
      default:  // removed or cleared
        apply_drop(w, e, hashes, n, c);
        break;
    }
  }
}

void BlockIndex::overlap(const int64_t* hashes, size_t n, Overlap& o) const {
  const uint32_t nw = nworkers_;
  o.request_blocks = static_cast<uint32_t>(n);
  o.workers = nw;
  o.per_tier.assign(size_t(nw) * 4, 0);
  o.tiered.assign(size_t(nw) * 4, 0);
  o.shared_ranges.clear();
  o.shared_hits = 0;
  const uint64_t shared_bit = opt_.shared_tier >= 0 ? (uint64_t(1) << opt_.shared_tier) : 0;
  const uint64_t shared_lanes = shared_bit * 0x1111111111111111ULL;
  const uint32_t G = groups_;
  o.masks.resize(n * G);
  uint64_t* masks = o.masks.data();
  // Phase 1: the request's chain walked block by block. A block stored after its parent in one
  // run sits in the record after it, and one stored later is the parent's child hint, so a walk
  // over a stored chain mostly reads records in order; the hash index is asked only where both
  // miss (a chain's first block, blocks some other run stored). Each block's mask words are copied
  // out (zero for a missing block), so the passes below read one small array instead of the
  // records again; the shared pool's positions are gathered on the way.
  // Members in locals: the mask words written below are uint64_t, as some members are, so the
  // compiler would otherwise reload those after every write.
  const uint64_t* const arena = arena_;
  const uint64_t top = top_, S = stride();
  const auto holds_key = [&](uint64_t r, int64_t key) {
    const uint64_t* x = arena + r * S;
    return r < top && (x[2] & kLive) && static_cast<int64_t>(x[0]) == key;
  };
  size_t held = n;  // blocks before the first missing one
  int32_t run = -1, shared_hits = 0;
  uint32_t prev = kNone;
  constexpr uint64_t kWalkAhead = 32;  // records requested ahead on a run
  const uint64_t step = std::max<uint64_t>(1, 64 / (S * 8));  // records a cache line
  uint64_t ahead_from = ~uint64_t(0), ahead_to = 0;
  size_t asked = 0;  // index entries requested for blocks before this position
  // The shared pool's positions, as ranges: block i is (or is not) held by the shared tier.
  const auto note_shared = [&](size_t i, bool shared) {
    if (shared) {
      ++shared_hits;
      if (run < 0) run = static_cast<int32_t>(i);
    } else if (run >= 0) {
      o.shared_ranges.emplace_back(run, static_cast<int32_t>(i));
      run = -1;
    }
  };
  for (size_t i = 0; i < n; ++i) {
    // The common case first, tightly: one mask word (16 workers or fewer) and a chain stored in
    // order, each block in the record after its parent's. The loop below takes over where that
    // stops holding (and for more mask words).
    if (G == 1 && prev != kNone) {
      for (; i < n; ++i) {
        const uint64_t nr = uint64_t(prev) + 1;
        const uint64_t* x = arena + nr * S;
        if (nr >= top || !(x[2] & kLive) || static_cast<int64_t>(x[0]) != hashes[i]) break;
        const uint64_t mw = x[3];
        masks[i] = mw;
        note_shared(i, mw & shared_lanes);
        if (nr + kWalkAhead < top) __builtin_prefetch(arena + (nr + kWalkAhead) * S);
        const uint32_t c = child_of(x);
        if (c && c != nr + 2) __builtin_prefetch(arena + (c - 1) * S);
        prev = static_cast<uint32_t>(nr);
      }
      ahead_from = uint64_t(prev) + 1;  // the records up to prev + kWalkAhead are requested
      ahead_to = std::min<uint64_t>(top, uint64_t(prev) + kWalkAhead);
      if (i == n) break;
    }
    const int64_t key = hashes[i];
    uint32_t r = kNone;
    if (prev != kNone) {
      if (holds_key(uint64_t(prev) + 1, key)) {
        r = prev + 1;
      } else {
        const uint32_t c = child_of(arena + prev * S);
        if (c && holds_key(c - 1, key)) r = c - 1;
      }
    }
    if (r == kNone) {
      // Off the chain: the next blocks may be too (a missing stretch the shared pool walks
      // through), so their index entries are requested together.
      asked = std::max(asked, i);
      for (const size_t to = std::min(n, i + 8); asked < to; ++asked) prefetch(hashes[asked]);
      r = find(key);
    }
    uint64_t* m = masks + i * G;
    uint64_t shared = 0;
    if (r == kNone) {
      for (uint32_t g = 0; g < G; ++g) m[g] = 0;
      if (held == n) held = i;
    } else {
      const uint64_t* x = arena + r * S;
      for (uint32_t g = 0; g < G; ++g) shared |= (m[g] = x[3 + g]) & shared_lanes;
      // Records ahead on this run: the hardware's stream prefetcher needs a few lines to start,
      // and a run is only a few lines.
      if (r != ahead_from) ahead_to = r;  // a new run: nothing of it requested yet
      ahead_from = r + 1;
      for (const uint64_t to = std::min<uint64_t>(top, uint64_t(r) + kWalkAhead); ahead_to < to; ahead_to += step)
        __builtin_prefetch(arena + (ahead_to + 1) * S);
      // Where the chain goes on if the run ends here.
      const uint32_t c = child_of(x);
      if (c && c != r + 2) __builtin_prefetch(arena + (c - 1) * S);
    }
    note_shared(i, shared);
    if (r == kNone && !shared_bit) break;  // nothing past a missing block counts then
    prev = r;
  }
  o.shared_hits = shared_hits;
  if (run >= 0) o.shared_ranges.emplace_back(run, static_cast<int32_t>(n));
  // Phase 2: 16 workers a mask word at a time. alive: the tiers each worker still holds from the
  // request's start (per_tier is where a bit drops); cur: the tier of each worker's Dynamo
  // continuation, one-hot (tiered counts a stage's run when it ends). Per block that is an AND and
  // two compares per word; per-worker work happens only at the few places something changes.
  o.alive.assign(G, 0);
  o.cur.assign(G, 0);
  o.run_start.assign(nw, 0);
  uint64_t* alive = o.alive.data();
  uint64_t* cur = o.cur.data();
  int32_t* run_start = o.run_start.data();
  int32_t* per_tier = o.per_tier.data();
  int32_t* tiered = o.tiered.data();
  for (uint32_t g = 0; g < G; ++g) {
    const uint32_t lanes = nw > 16 * g ? std::min<uint32_t>(16, nw - 16 * g) : 0;
    const uint64_t lane_mask = lanes == 16 ? ~uint64_t(0) : ((uint64_t(1) << (4 * lanes)) - 1);
    alive[g] = lane_mask;
    cur[g] = 0x1111111111111111ULL & lane_mask;
  }
  // Groups are independent: each runs over the blocks with its state in registers, until it has
  // nothing left (or the held blocks end). The prefixes extend over the blocks up to where the
  // last group stopped.
  size_t reach = 0;
  for (uint32_t g = 0; g < G; ++g) {
    uint64_t a = alive[g], c = cur[g];
    size_t i = 0;
    for (; i < held && (a | c); ++i) {
      const uint64_t m = masks[i * G + g];
      const uint64_t na = a & m;
      if (na != a) {
        for (uint64_t d = a & ~na; d; d &= d - 1) {
          const int b = __builtin_ctzll(d);
          per_tier[size_t(16 * g + b / 4) * 4 + b % 4] = static_cast<int32_t>(i);
        }
        a = na;
      }
      if ((m & c) != c) {
        for (uint64_t miss = c & ~m; miss; miss &= miss - 1) {
          const int b = __builtin_ctzll(miss);
          const int lane = b / 4, st = b % 4;
          const uint32_t w = 16 * g + lane;
          tiered[size_t(w) * 4 + st] += static_cast<int32_t>(i) - run_start[w];
          c &= ~(uint64_t(15) << (4 * lane));
          const uint32_t higher = static_cast<uint32_t>((m >> (4 * lane)) & 15) & ~((1u << st) - 1);
          if (higher) {
            c |= uint64_t(1) << (4 * lane + __builtin_ctz(higher));
            run_start[w] = static_cast<int32_t>(i);
          }
        }
      }
    }
    alive[g] = a;
    cur[g] = c;
    reach = std::max(reach, i);
  }
  for (uint32_t g = 0; g < G; ++g) {
    for (uint64_t d = alive[g]; d; d &= d - 1) {
      const int b = __builtin_ctzll(d);
      per_tier[size_t(16 * g + b / 4) * 4 + b % 4] = static_cast<int32_t>(reach);
    }
    for (uint64_t c = cur[g]; c; c &= c - 1) {
      const int b = __builtin_ctzll(c);
      const uint32_t w = 16 * g + b / 4;
      tiered[size_t(w) * 4 + b % 4] += static_cast<int32_t>(reach) - run_start[w];
    }
  }
}

void BlockIndex::score(const Overlap& o, const uint32_t* candidates, size_t nc, double block_size,
                       const WorkerLoad* loads, const ScoringConfig& cfg, WorkerScore* out) const {
  double min_prefill = INFINITY;
  for (size_t k = 0; k < nc; ++k) min_prefill = std::min(min_prefill, loads[k].active_prefill_tokens);
  if (!std::isfinite(min_prefill)) min_prefill = 0;
  for (size_t k = 0; k < nc; ++k) {
    const uint32_t w = candidates[k];
    const bool known = w < o.workers;
    const int32_t* t = known ? &o.tiered[size_t(w) * 4] : nullptr;
    const WorkerLoad& load = loads[k];
    const double device = known ? t[0] : 0, host = known ? t[1] : 0;
    const double disk = known ? t[2] + (cfg.external_as_disk ? t[3] : 0) : 0;
    const double rb = static_cast<double>(o.request_blocks);
    double decay = 1;
    if (cfg.track_prefill_tokens && cfg.overlap_score_credit_decay > 0 && rb > 0)
      decay =
          1 / (1 + (cfg.overlap_score_credit_decay * ((load.active_prefill_tokens - min_prefill) / block_size)) / rb);
    // hits_beyond(round(device)): shared positions >= n
    const int32_t from = static_cast<int32_t>(std::round(device));
    double beyond = 0;
    for (const auto& [s, e] : o.shared_ranges) {
      if (e <= from) continue;
      beyond += e - std::max(s, from);
    }
    const double credit = cfg.overlap_score_credit * decay * device + cfg.host_cache_hit_weight * host +
                          cfg.disk_cache_hit_weight * disk + cfg.shared_cache_multiplier * beyond;
    const double raw_prefill = rb + (cfg.track_prefill_tokens ? load.active_prefill_tokens / block_size : 0);
    const double req_cost = cfg.decode_active_request_weight * load.active_requests;
    const double logit =
        load.decode_only && credit > 0 && !cfg.track_prefill_tokens
            ? std::max(0.0, load.decode_blocks - credit) + req_cost
            : cfg.prefill_load_scale * std::max(0.0, raw_prefill - credit) + load.decode_blocks + req_cost;
    out[k] = {logit, credit, device, host, disk, beyond};
  }
}

LookupResult BlockIndex::lookup(int64_t hash) const {
  LookupResult r;
  uint32_t at = find(hash);
  if (at == kNone) {
    auto it = by_token_hash_.find(hash);
    if (it == by_token_hash_.end()) return r;
    at = find(it->second);
    if (at == kNone) return r;
  }
  const uint64_t* s = rec(at);
  r.found = true;
  r.hash = static_cast<int64_t>(s[0]);
  r.has_parent = s[2] & kHasParent;
  r.parent = static_cast<int64_t>(s[1]);
  const uint32_t d = static_cast<uint32_t>(s[2] >> 32);
  if (d) {
    r.has_token_hash = true;
    r.token_hash = dual_[d - 1].token_hash;
  }
  r.masks.resize(nworkers_);
  for (uint32_t w = 0; w < nworkers_; ++w) r.masks[w] = mask_of(s, w);
  return r;
}

size_t BlockIndex::memory_bytes() const {
  return index_bytes_ + arena_bytes_ + (free_.capacity() + run_.capacity()) * 4 + chunks_.capacity() * sizeof(Chunk) +
         dual_.capacity() * sizeof(Dual) + dual_free_.capacity() * 4 + by_token_hash_.size() * 48 +
         stats_.capacity() * sizeof(WorkerStats);
}

}  // namespace kv::index

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
  uint64_t cap = 1 << 8;
  while (cap * 7 < o.expected_blocks * 10) cap *= 2;  // <= 70% full at the expected size
  rebuild(cap, 1);
}

BlockIndex::~BlockIndex() {
  unmap_table(table_, table_bytes_);
}

uint64_t* BlockIndex::map_table(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (bytes >= (size_t(2) << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
  // Fault the whole table in now, in one call: hashed inserts land all over it, so within the
  // first few thousand blocks nearly every page is touched anyway, each touch a page fault taken
  // on the event path. A kernel without it (before 5.14) faults pages in as they are touched.
  madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
  return static_cast<uint64_t*>(p);
}

void BlockIndex::unmap_table(uint64_t* t, size_t bytes) {
  if (t) munmap(t, bytes);
}

void BlockIndex::rebuild(uint64_t cap, uint32_t groups) {
  uint64_t* old = table_;
  const size_t old_bytes = table_bytes_;
  const uint32_t old_groups = groups_;
  const uint64_t old_cap = cap_;
  const size_t old_stride = 3 + old_groups;
  table_bytes_ = cap * (3 + groups) * 8;
  table_ = map_table(table_bytes_);
  groups_ = groups;
  cap_ = cap;
  mask_ = cap - 1;
  for (uint64_t i = 0; i < old_cap; ++i) {
    const uint64_t* s = &old[i * old_stride];
    if (!(s[2] & kUsed)) continue;
    uint64_t j = mix(static_cast<int64_t>(s[0])) & mask_;
    while (slot(j)[2] & kUsed) j = (j + 1) & mask_;
    uint64_t* d = slot(j);
    d[0] = s[0];
    d[1] = s[1];
    d[2] = s[2];
    for (uint32_t g = 0; g < old_groups; ++g) d[3 + g] = s[3 + g];
  }
  unmap_table(old, old_bytes);
}

void BlockIndex::ensure_worker(uint32_t w) {
  if (w < nworkers_) return;
  nworkers_ = w + 1;
  stats_.resize(nworkers_);
  if (w >= 16 * groups_) rebuild(cap_, (w >> 4) + 1);
}

const WorkerStats& BlockIndex::worker_stats(uint32_t w) const {
  static const WorkerStats none{};
  return w < nworkers_ ? stats_[w] : none;
}

int64_t BlockIndex::find(int64_t key) const {
  uint64_t i = mix(key) & mask_;
  for (;;) {
    const uint64_t* s = slot(i);
    if (!(s[2] & kUsed)) return -1;
    if (static_cast<int64_t>(s[0]) == key) return static_cast<int64_t>(i);
    i = (i + 1) & mask_;
  }
}

uint64_t BlockIndex::find_or_insert(int64_t key, bool has_parent, int64_t parent) {
  uint64_t i = mix(key) & mask_;
  for (;;) {
    const uint64_t* s = slot(i);
    if (!(s[2] & kUsed)) break;
    if (static_cast<int64_t>(s[0]) == key) return i;
    i = (i + 1) & mask_;
  }
  // Absent: `i` is the empty slot ending its probe run, where insert() would put it, unless the
  // table has to grow first.
  if ((live_ + 1) * 10 > cap_ * 7) return insert(key, has_parent, parent);
  uint64_t* s = slot(i);
  s[0] = static_cast<uint64_t>(key);
  s[1] = static_cast<uint64_t>(parent);
  s[2] = kUsed | (has_parent ? kHasParent : 0);
  for (uint32_t g = 0; g < groups_; ++g) s[3 + g] = 0;
  ++live_;
  return i;
}

uint64_t BlockIndex::insert(int64_t key, bool has_parent, int64_t parent) {
  if ((live_ + 1) * 10 > cap_ * 7) rebuild(cap_ * 2, groups_);
  uint64_t i = mix(key) & mask_;
  while (slot(i)[2] & kUsed) i = (i + 1) & mask_;
  uint64_t* s = slot(i);
  s[0] = static_cast<uint64_t>(key);
  s[1] = static_cast<uint64_t>(parent);
  s[2] = kUsed | (has_parent ? kHasParent : 0);
  for (uint32_t g = 0; g < groups_; ++g) s[3 + g] = 0;
  ++live_;
  return i;
}

void BlockIndex::erase_at(uint64_t i) {
  uint64_t* s = slot(i);
  const uint32_t d = static_cast<uint32_t>(s[2] >> 32);
  if (d) {
    const int64_t th = dual_[d - 1].token_hash;
    if (th != static_cast<int64_t>(s[0])) erase_token_key(th);
    dual_free_.push_back(d - 1);
  }
  // Backward-shift deletion: pull later members of the probe run into the hole.
  const size_t st = stride();
  uint64_t hole = i, j = i;
  for (;;) {
    j = (j + 1) & mask_;
    uint64_t* sj = slot(j);
    if (!(sj[2] & kUsed)) break;
    const uint64_t home = mix(static_cast<int64_t>(sj[0])) & mask_;
    // sj may move to the hole unless its home lies cyclically in (hole, j].
    const bool in_between = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (in_between) continue;
    std::memcpy(slot(hole), sj, st * 8);
    hole = j;
  }
  std::memset(slot(hole), 0, st * 8);
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
  if (has_parent && !parent_held && find(parent) < 0) {
    ++c.orphan_stores;
    ++ws.orphan_stores;
  }
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  bool hp = has_parent;
  int64_t p = parent;
  constexpr size_t kAhead = 8;
  for (size_t i = 0; i < n && i < kAhead; ++i) prefetch(hashes[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) prefetch(hashes[i + kAhead]);
    uint64_t* s = slot(find_or_insert(hashes[i], hp, p));
    const uint8_t m = mask_of(s, w);
    if (!(m & bit)) {
      set_mask(s, w, m | bit);
      ++ws.tier_blocks[tier];
      ++c.added;
    }
    hp = true;
    p = hashes[i];
  }
}

void BlockIndex::remove(uint32_t w, uint8_t tier, const int64_t* hashes, size_t n, ApplyCounts& c) {
  ensure_worker(w);
  WorkerStats& ws = stats_[w];
  const uint8_t bit = static_cast<uint8_t>(1u << tier);
  for (size_t i = 0; i < n; ++i) {
    const int64_t at = find(hashes[i]);
    uint64_t* s = at < 0 ? nullptr : slot(static_cast<uint64_t>(at));
    const uint8_t m = s ? mask_of(s, w) : 0;
    if (!(m & bit)) {
      ++c.unknown_removals;
      ++ws.unknown_removals;
      continue;
    }
    set_mask(s, w, m & ~bit);
    --ws.tier_blocks[tier];
    ++c.removed;
    if (empty_masks(s)) erase_at(static_cast<uint64_t>(at));
  }
}

uint64_t BlockIndex::clear(uint32_t w) {
  if (w >= nworkers_) return 0;
  uint64_t removed = 0;
  std::vector<int64_t> gone;
  for (uint64_t i = 0; i < cap_; ++i) {
    uint64_t* s = slot(i);
    if (!(s[2] & kUsed)) continue;
    const uint8_t m = mask_of(s, w);
    if (!m) continue;
    removed += static_cast<uint64_t>(__builtin_popcount(m));
    set_mask(s, w, 0);
    if (empty_masks(s)) gone.push_back(static_cast<int64_t>(s[0]));
  }
  // Erased after the scan: backward shifts would otherwise move unvisited slots behind it.
  for (int64_t k : gone) {
    const int64_t at = find(k);
    if (at >= 0) erase_at(static_cast<uint64_t>(at));
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
    const int64_t at = find(e.parent);
    const uint32_t d = at < 0 ? 0 : static_cast<uint32_t>(slot(static_cast<uint64_t>(at))[2] >> 32);
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
    uint64_t* s = slot(static_cast<uint64_t>(find(hs[i])));
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
  if (!events::decode_batch(data, size, opt_.limits, opt_.verify || want_tokens, b)) {
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
  const size_t nhashes = b.hashes.size();
  size_t prefetched = 0;
  // The last block the previous event stored: present in the table (nothing ran in between), so
  // an event that chains from it needs no orphan probe.
  bool held = false;
  int64_t held_hash = 0;
  for (const Event& e : b.events) {
    ++c.events;
    const size_t n = e.hash_end - e.hash_begin;
    // Slots a few events ahead are requested before this one's are read: a frame's blocks land
    // all over the table, and their cache misses then overlap instead of coming one event at a
    // time.
    for (const size_t to = std::min(nhashes, size_t(e.hash_end) + kFrameAhead); prefetched < to; ++prefetched)
      prefetch(hashes[prefetched]);
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
  // Phase 1: every block looked up, home slots prefetched a few blocks ahead so that the cache
  // misses overlap (as many as the core keeps in flight). Each block's mask words are copied out
  // (zero for a missing block), so the passes below read one small array instead of the slots
  // again; the shared pool's positions are gathered on the way.
  size_t held = n;  // blocks before the first missing one
  int32_t run = -1;
  constexpr size_t kAhead = 12, kRing = 16;  // home slots computed once, kAhead blocks early
  uint64_t home[kRing];
  for (size_t i = 0; i < n && i < kAhead; ++i) __builtin_prefetch(slot(home[i] = mix(hashes[i]) & mask_));
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(slot(home[(i + kAhead) % kRing] = mix(hashes[i + kAhead]) & mask_));
    const int64_t key = hashes[i];
    uint64_t j = home[i % kRing];
    const uint64_t* s = slot(j);
    while ((s[2] & kUsed) && static_cast<int64_t>(s[0]) != key) s = slot(j = (j + 1) & mask_);
    const bool found = s[2] & kUsed;
    uint64_t* m = masks + i * G;
    uint64_t shared = 0;
    if (!found) {
      for (uint32_t g = 0; g < G; ++g) m[g] = 0;
      if (held == n) held = i;
    } else {
      for (uint32_t g = 0; g < G; ++g) shared |= (m[g] = s[3 + g]) & shared_lanes;
    }
    if (shared) {
      ++o.shared_hits;
      if (run < 0) run = static_cast<int32_t>(i);
    } else if (run >= 0) {
      o.shared_ranges.emplace_back(run, static_cast<int32_t>(i));
      run = -1;
    }
    if (!found && !shared_bit) break;  // nothing past a missing block counts then
  }
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
  int64_t at = find(hash);
  if (at < 0) {
    auto it = by_token_hash_.find(hash);
    if (it == by_token_hash_.end()) return r;
    at = find(it->second);
    if (at < 0) return r;
  }
  const uint64_t* s = slot(static_cast<uint64_t>(at));
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
  return table_bytes_ + dual_.capacity() * sizeof(Dual) + dual_free_.capacity() * 4 + by_token_hash_.size() * 48 +
         stats_.capacity() * sizeof(WorkerStats);
}

}  // namespace kv::index

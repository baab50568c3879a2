// BlockIndex::apply_frames: several workers' frames in one call, with the SHA-256 chains of two
// frames recomputed side by side when verification is on.
//
// A verified frame is one dependent chain (each page hashes the page before, each event chains
// from the last), so one frame keeps one SHA lane busy, and sha256rnds2's latency leaves the unit
// mostly idle. Two frames can share the unit (sha256_page_digest2) when applying them in either
// order gives the same index: other workers, no hash of one among the other's hashes or parents,
// no AllBlocksCleared. Each lane then runs its frame's events in order; frames start in list
// order, a frame waiting while the other lane holds one it cannot run beside. What the two
// lanes change in the table commutes (masks per worker, disjoint blocks, counters); the one
// order-dependent structure, the token-hash map, gets the later frame's changes only once the
// earlier frame is done.
#include <algorithm>

#include "block_index.h"
#include "sha256.h"

namespace kv::index {

using events::Batch;
using events::Event;

namespace {

bool has(const std::vector<int64_t>& sorted, int64_t h) {
  return std::binary_search(sorted.begin(), sorted.end(), h);
}

}  // namespace

bool BlockIndex::independent(size_t i, size_t j, const FrameIn* in) const {
  const Frame& a = frames_[i];
  const Frame& b = frames_[j];
  if (in[i].worker == in[j].worker || a.clears || b.clears) return false;
  for (int64_t h : b.keys)
    if (has(a.keys, h)) return false;
  for (int64_t h : b.parents)
    if (has(a.keys, h)) return false;
  for (int64_t h : a.parents)
    if (has(b.keys, h)) return false;
  return true;
}

// One frame in progress on a lane: its next event, and the chain being hashed (if any).
struct BlockIndex::Lane {
  long frame = -1;  // -1: idle
  size_t event = 0, prefetched = 0;
  bool held = false;  // as in apply_events
  int64_t held_hash = 0;
  bool hashing = false;
  size_t page = 0;
  std::vector<TokenOp> ops;  // token-hash map changes held back (the later frame)
};

void BlockIndex::apply_frames(const FrameIn* in, size_t k, ApplyCounts* counts, bool* ok) {
  if (frames_.size() < k) frames_.resize(k);
  for (size_t i = 0; i < k; ++i)
    ok[i] = decode_frame(in[i].worker, in[i].data, in[i].size, frames_[i].batch, counts[i]);
  if (!opt_.verify || k < 2) {
    for (size_t i = 0; i < k; ++i)
      if (ok[i]) apply_events(in[i].worker, frames_[i].batch, counts[i]);
    return;
  }
  for (size_t i = 0; i < k; ++i) {
    Frame& f = frames_[i];
    f.keys.assign(f.batch.hashes.begin(), f.batch.hashes.end());
    std::sort(f.keys.begin(), f.keys.end());
    f.parents.clear();
    f.clears = false;
    for (const Event& e : f.batch.events) {
      if (e.has_parent) f.parents.push_back(e.parent);
      if (e.kind == events::kCleared) f.clears = true;
    }
  }
  Lane lane[2];
  ChainJob* jobs = lane_jobs_;
  size_t next = 0;
  // Runs `l`'s frame until a chain is to be hashed or the frame is done (apply_events' loop body).
  auto step = [&](int l) {
    Lane& a = lane[l];
    const uint32_t w = in[a.frame].worker;
    const Batch& b = frames_[a.frame].batch;
    ApplyCounts& c = counts[a.frame];
    const int64_t* hashes = b.hashes.data();
    while (!a.hashing && a.event < b.events.size()) {
      const Event& e = b.events[a.event++];
      ++c.events;
      const size_t n = e.hash_end - e.hash_begin;
      for (const size_t to = std::min(b.hashes.size(), size_t(e.hash_end) + kFrameAhead); a.prefetched < to;
           ++a.prefetched)
        prefetch(hashes[a.prefetched]);
      const bool parent_held = a.held && e.has_parent && e.parent == a.held_hash;
      a.held = false;
      switch (e.kind) {
        case events::kStored:
          ++c.stored_events;
          c.stored_blocks += n;
          if (begin_verified(w, e, b, parent_held, c, jobs[l])) {
            a.hashing = true;
            a.page = 0;
          }
          if (n) {
            a.held = true;
            a.held_hash = hashes[e.hash_end - 1];
          }
          break;
        case events::kRemoved:
          ++c.removed_events;
          c.removed_blocks += n;
          remove(w, e.tier, hashes + e.hash_begin, n, c);
          break;
        default:
          ++c.cleared_events;
          c.removed += clear(w);
          break;
      }
    }
    if (!a.hashing && a.event == b.events.size()) a.frame = -1;
  };
  // The lane whose frame comes first writes the token-hash map directly; the other holds its
  // changes back until then.
  auto run = [&](int l, auto&& body) {
    const Lane& o = lane[1 - l];
    token_ops_ = o.frame >= 0 && o.frame < lane[l].frame ? &lane[l].ops : nullptr;
    body();
    token_ops_ = nullptr;
  };
  auto flush = [&](int l) {
    for (const TokenOp& op : lane[l].ops) {
      if (op.erase) by_token_hash_.erase(op.token_hash);
      else by_token_hash_[op.token_hash] = op.hash;
    }
    lane[l].ops.clear();
  };
  for (;;) {
    for (int l = 0; l < 2; ++l) {
      Lane& a = lane[l];
      const Lane& o = lane[1 - l];
      while (!a.hashing) {
        if (a.frame < 0) {
          while (next < k && !ok[next]) ++next;  // a refused frame applies nothing
          if (next >= k || (o.frame >= 0 && !independent(o.frame, next, in))) break;
          a = Lane{static_cast<long>(next++), 0, 0, false, 0, false, 0, std::move(a.ops)};
        }
        run(l, [&] { step(l); });
        if (a.frame < 0 && o.frame >= 0) flush(1 - l);  // the earlier frame is done
      }
    }
    const bool h0 = lane[0].hashing, h1 = lane[1].hashing;
    if (!h0 && !h1) break;
    if (h0 && h1) {
      sha256_page_digest2(jobs[0].page(lane[0].page), jobs[0].digests.data() + 32 * lane[0].page,
                          jobs[1].page(lane[1].page), jobs[1].digests.data() + 32 * lane[1].page);
    } else {
      const int l = h0 ? 0 : 1;
      sha256_page_digest(jobs[l].page(lane[l].page), jobs[l].digests.data() + 32 * lane[l].page);
    }
    for (int l = 0; l < 2; ++l) {
      Lane& a = lane[l];
      if (!a.hashing || ++a.page < jobs[l].pages) continue;
      a.hashing = false;
      run(l, [&] { finish_verified(jobs[l]); });
    }
  }
  flush(0);
  flush(1);
}

}  // namespace kv::index

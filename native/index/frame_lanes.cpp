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

void BlockIndex::KeySet::reset(size_t n) {
  size_t cap = 64;
  while (cap < 2 * n) cap *= 2;
  if (keys.size() < cap) {
    keys.assign(cap, 0);
    stamp.assign(cap, 0);
    now = 0;
  }
  mask = cap - 1;
  if (++now == 0) {  // stamps wrapped: clear them once
    std::fill(stamp.begin(), stamp.end(), 0);
    now = 1;
  }
}

void BlockIndex::KeySet::add(int64_t k) {
  uint64_t i = mix(k) & mask;
  while (stamp[i] == now && keys[i] != k) i = (i + 1) & mask;
  keys[i] = k;
  stamp[i] = now;
}

bool BlockIndex::KeySet::has(int64_t k) const {
  for (uint64_t i = mix(k) & mask;; i = (i + 1) & mask) {
    if (stamp[i] != now) return false;
    if (keys[i] == k) return true;
  }
}

// Whether `candidate`'s frame (its keys not yet built) can run beside `running`'s: other workers,
// no AllBlocksCleared, no hash of one among the other's hashes or parents. Builds the candidate's
// keys on the way.
bool BlockIndex::independent(const Lane& running, Lane& candidate, const FrameIn* in) const {
  if (in[running.frame].worker == in[candidate.frame].worker || running.clears) return false;
  const Batch& b = frames_[candidate.frame].batch;
  candidate.keys.reset(b.hashes.size());
  for (int64_t h : b.hashes) {
    if (running.keys.has(h)) return false;
    candidate.keys.add(h);
  }
  for (const Event& e : b.events) {
    if (e.kind == events::kCleared) return false;
    if (e.has_parent && running.keys.has(e.parent)) return false;
  }
  for (const Event& e : frames_[running.frame].batch.events)
    if (e.has_parent && candidate.keys.has(e.parent)) return false;
  return true;
}

void BlockIndex::apply_frames(const FrameIn* in, size_t k, ApplyCounts* counts, bool* ok) {
  if (frames_.size() < k) frames_.resize(k);
  for (size_t i = 0; i < k; ++i)
    ok[i] = decode_frame(in[i].worker, in[i].data, in[i].size, frames_[i].batch, counts[i], false);
  if (!opt_.verify || k < 2) {
    for (size_t i = 0; i < k; ++i)
      if (ok[i]) apply_events(in[i].worker, frames_[i].batch, counts[i]);
    return;
  }
  Lane* lane = lanes_;  // kept across calls: their buffers are reused
  for (int l = 0; l < 2; ++l) {
    lane[l].frame = -1;
    lane[l].hashing = false;
    lane[l].ops.clear();
  }
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
        default:  // removed or cleared
          apply_drop(w, e, hashes, n, c);
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
          if (next >= k) break;
          a.frame = static_cast<long>(next);
          if (o.frame >= 0 && !independent(o, a, in)) {
            a.frame = -1;  // waits for the other lane's frame
            break;
          }
          if (o.frame < 0) {  // nothing to check against: its keys, for the frames that come beside it
            const Batch& b = frames_[next].batch;
            a.keys.reset(b.hashes.size());
            for (int64_t h : b.hashes) a.keys.add(h);
          }
          a.clears = false;
          for (const Event& e : frames_[next].batch.events) a.clears = a.clears || e.kind == events::kCleared;
          ++next;
          a.event = 0;
          a.held = a.hashing = false;
        }
        run(l, [&] { step(l); });
        // This lane's frame is done (or it had none): whatever the other lane held back lands now,
        // before this lane starts a frame that comes after the other's.
        if (a.frame < 0) flush(1 - l);
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

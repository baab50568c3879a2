// Fuzz target for the KV-event decoder and the index it feeds, in libFuzzer's form
// (LLVMFuzzerTestOneInput), so libFuzzer or AFL++ can drive it where they are installed; `npm test`
// drives it with driver.cpp (g++, ASan + UBSan, GCC's trace-pc edge coverage).
// Besides "no crash, no sanitizer report", it checks: decoding with and without token ids gives
// the same verdict and events; every event's ranges lie inside the batch; applying the frame
// and then clearing every worker leaves the index empty (the deletion path); the SIMD and scalar
// paths over token-id runs decode it alike, and so do the BlockStored fast path and the adapters.
// The same input is also read as Dynamo's event-plane envelope, raw and behind a well-formed
// version/length header (so mutations reach its msgpack), and every range a decoded frame holds
// must lie inside it, a refused one keep nothing and name a field.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "adapters/dynamo_envelope.h"
#include "block_index.h"
#include "event_batch.h"
#include "int_runs.h"

namespace {

void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_decoder: invariant broken: %s\n", what);
  std::abort();
}

void check_dynamo(const uint8_t* data, size_t size) {
  using namespace kv::events::dynamo;
  static Frame f;
  if (!decode_envelope(data, size, f)) {
    require(!f.error_field.empty() && !f.error_text.empty(), "refused Dynamo frame without a field or reason");
    require(f.records.empty() && f.blocks.empty() && f.hashes.empty(), "refused Dynamo frame kept records");
    return;
  }
  require(f.error_field.empty(), "decoded Dynamo frame with an error");
  for (const Record& r : f.records) {
    const size_t n = r.kind == kStored ? f.blocks.size() : r.kind == kRemoved ? f.hashes.size() : 0;
    require(r.begin <= r.end && r.end <= n, "Dynamo record range outside the frame");
    const char* in = reinterpret_cast<const char*>(data);
    const bool inside = r.storage_tier.data() >= in && r.storage_tier.data() + r.storage_tier.size() <= in + size;
    require(inside || r.storage_tier == "device", "Dynamo storage tier neither from the input nor the default");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kv;
  check_dynamo(data, size);
  {
    static std::vector<uint8_t> framed;
    framed.assign({1, uint8_t(size >> 24), uint8_t(size >> 16), uint8_t(size >> 8), uint8_t(size)});
    framed.insert(framed.end(), data, data + size);
    check_dynamo(framed.data(), framed.size());
  }
  events::Limits limits;
  limits.max_events = 4096;
  limits.max_bytes = 1 << 22;
  static events::Batch a, b;
  const bool ok_a = events::decode_batch(data, size, limits, true, a);
  const bool ok_b = events::decode_batch(data, size, limits, false, b);
  require(ok_a == ok_b, "verdict depends on want_tokens");
  require(a.error == b.error, "error kind depends on want_tokens");
  if (ok_a) {
    require(a.events.size() == b.events.size() && a.bad.size() == b.bad.size(), "event counts depend on want_tokens");
    require(a.hashes == b.hashes, "hashes depend on want_tokens");
    for (const auto& e : a.events) {
      require(e.hash_begin <= e.hash_end && e.hash_end <= a.hashes.size(), "hash range outside the batch");
      require(e.tok_begin <= e.tok_end && e.tok_end <= a.tokens.size(), "token range outside the batch");
      if (e.kind == events::kStored && !e.bigram) require(e.tok_end - e.tok_begin == e.units, "token count");
    }
    for (const auto& x : a.bad) require(!x.reason.empty(), "bad event without a reason");
  } else {
    require(a.events.empty() && a.hashes.empty() && !a.error_text.empty(),
            "refused batch kept events or has no reason");
  }
  {
    // SGLang's BlockStored fast path against the adapters alone.
    static events::Batch g;
    events::Limits general = limits;
    general.fast_path = false;
    const bool ok_g = events::decode_batch(data, size, general, true, g);
    require(ok_g == ok_a && g.error == a.error && g.error_text == a.error_text && g.hashes == a.hashes &&
                g.tokens == a.tokens && g.events.size() == a.events.size() && g.bad.size() == a.bad.size(),
            "the BlockStored fast path and the adapters disagree");
    for (size_t i = 0; i < g.events.size() && i < a.events.size(); ++i) {
      const events::Event &x = g.events[i], &y = a.events[i];
      require(x.kind == y.kind && x.tier == y.tier && x.has_parent == y.has_parent && x.parent == y.parent &&
                  x.block_size == y.block_size && x.hash_begin == y.hash_begin && x.hash_end == y.hash_end &&
                  x.tok_begin == y.tok_begin && x.tok_end == y.tok_end && x.units == y.units && x.bigram == y.bigram &&
                  x.medium.present == y.medium.present && x.medium.value == y.medium.value &&
                  x.cache_salt.present == y.cache_salt.present && x.session_id.present == y.session_id.present &&
                  x.lora_name.present == y.lora_name.present && x.has_lora_id == y.has_lora_id &&
                  x.lora_id == y.lora_id,
              "the BlockStored fast path and the adapters decode an event differently");
    }
    for (size_t i = 0; i < g.bad.size() && i < a.bad.size(); ++i)
      require(g.bad[i].index == a.bad[i].index && g.bad[i].kind == a.bad[i].kind && g.bad[i].reason == a.bad[i].reason,
              "the BlockStored fast path and the adapters report a bad event differently");
  }
  {
    // Every SIMD path over token-id runs this host has (the best one is the default) against the
    // scalar one, reading the ids (decoding) and stepping over them (skipping).
    const mp::IntRunPath best = mp::int_run_path();
    static events::Batch s, v;
    for (const bool tokens : {true, false}) {
      mp::set_int_run_path(mp::IntRunPath::Scalar);
      const bool ok_s = events::decode_batch(data, size, limits, tokens, s);
      for (const mp::IntRunPath path : {mp::IntRunPath::Avx2, mp::IntRunPath::Avx512}) {
        if (!mp::set_int_run_path(path)) continue;
        const bool ok_v = events::decode_batch(data, size, limits, tokens, v);
        require(ok_s == ok_v && s.error == v.error && s.events.size() == v.events.size() && s.hashes == v.hashes &&
                    s.tokens == v.tokens && s.bad.size() == v.bad.size(),
                "the SIMD and scalar integer-run paths disagree");
      }
    }
    mp::set_int_run_path(best);
  }
  for (bool verify : {false, true}) {
    index::Options o;
    o.verify = verify;
    o.limits = limits;
    index::BlockIndex idx(o);
    index::ApplyCounts c;
    const bool applied = idx.apply_frame(static_cast<uint32_t>(size % 3), data, size, c);
    require(applied == ok_a, "index verdict differs from the decoder's");
    require(applied || idx.blocks() == 0, "a refused frame changed the index");
    if (applied) require(c.events == a.events.size() && c.bad_events == a.bad.size(), "apply counts");
    if (size > 8) {
      // The same frame for a second worker, a store/remove pair through the key-level API, then
      // everything cleared: the table must come back empty.
      index::ApplyCounts d, two[2];
      idx.apply_frame(7, data, size, d);
      // Two workers' copies in one call (with verification: the SHA lanes' scheduling).
      const index::BlockIndex::FrameIn in[2] = {{7, data, size}, {8, data, size}};
      bool oks[2];
      idx.apply_frames(in, 2, two, oks);
      require(oks[0] == ok_a && oks[1] == ok_a, "apply_frames verdict differs from the decoder's");
      int64_t h[2] = {static_cast<int64_t>(size), static_cast<int64_t>(data[0]) << 56};
      idx.store(20, static_cast<uint8_t>(data[1] & 3), h, 2, (data[2] & 1) != 0, h[1], d);
      idx.remove(20, static_cast<uint8_t>(data[1] & 3), h, 1, d);
    }
    for (uint32_t w : {static_cast<uint32_t>(size % 3), 7u, 8u, 20u}) idx.clear(w);
    require(idx.blocks() == 0, "blocks left after clearing every worker");
    index::Overlap ov;
    idx.overlap(a.hashes.data(), a.hashes.size(), ov);
  }
  return 0;
}

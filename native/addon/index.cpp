// Glue for the block index (native/index): a KvBlockIndex object per router. One applyFrame call
// per ZMQ payload decodes, optionally verifies and applies it; JavaScript gets counts written
// into a Float64Array it owns, and objects only for bad events or a refused batch.
#include <napi.h>

#include <cmath>
#include <ctime>

#include "../events/int_runs.h"
#include "../index/block_index.h"
#include "args.h"
#include "batch_js.h"
#include "register.h"

namespace {

using kv::index::ApplyCounts;
using kv::index::BlockIndex;

// A frame's slots: shared_tables.h's KV_APPLY_COUNTS, then KV_FRAME_EXTRAS (what TypeScript reads).
#define KV_FRAME_SLOT(id) k_##id,
enum FrameSlot : size_t { KV_APPLY_COUNTS(KV_FRAME_SLOT) KV_FRAME_EXTRAS(KV_FRAME_SLOT) kCountFields };
#undef KV_FRAME_SLOT

// A worker's counters: shared_tables.h's KV_WORKER_COUNTERS after the per-tier and per-kind ones.
constexpr size_t kWorkerStatFields = kv::events::kTiers + static_cast<size_t>(kv::events::BadKind::Count) +
                                     static_cast<size_t>(kv::events::BatchError::Count) +
                                     (0 KV_WORKER_COUNTERS(KV_TABLE_COUNT));

void WriteCounts(const ApplyCounts& c, double* o) {
#define KV_FRAME_COUNT(id) o[k_##id] = static_cast<double>(c.id);
  KV_APPLY_COUNTS(KV_FRAME_COUNT)
#undef KV_FRAME_COUNT
}

void WriteFrame(const ApplyCounts& c, const kv::events::Batch& b, double* o) {
  WriteCounts(c, o);
  o[k_ts] = b.ts;
  o[k_dp_rank] = b.has_dp ? static_cast<double>(b.dp) : NAN;
}

class IndexWrap : public Napi::ObjectWrap<IndexWrap> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "KvBlockIndex",
        {InstanceMethod("applyFrame", &IndexWrap::ApplyFrame), InstanceMethod("applyFrames", &IndexWrap::ApplyFrames),
         InstanceMethod("applyFrameColumns", &IndexWrap::ApplyFrameColumns), InstanceMethod("store", &IndexWrap::Store),
         InstanceMethod("remove", &IndexWrap::Remove), InstanceMethod("clear", &IndexWrap::Clear),
         InstanceMethod("overlapInto", &IndexWrap::OverlapInto), InstanceMethod("scoreInto", &IndexWrap::ScoreInto),
         InstanceMethod("lookup", &IndexWrap::Lookup), InstanceMethod("workerStats", &IndexWrap::WorkerStatsFn),
         InstanceMethod("blocks", &IndexWrap::Blocks), InstanceMethod("memoryBytes", &IndexWrap::MemoryBytes)});
  }

  explicit IndexWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<IndexWrap>(info) {
    kv::index::Options o;
    if (info.Length() > 0 && info[0].IsObject()) {
      auto opts = info[0].As<Napi::Object>();
      auto num = [&](const char* k, double d) {
        auto v = opts.Get(k);
        return v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : d;
      };
      o.verify = opts.Get("verify").ToBoolean().Value();
      o.shared_tier = static_cast<int>(num("sharedTier", kv::events::kExternal));
      if (o.shared_tier < -1 || o.shared_tier > 3) kvglue::ThrowRange(info.Env(), "sharedTier must be -1..3");
      o.expected_blocks = static_cast<uint64_t>(std::max(0.0, num("expectedBlocks", 0)));
      o.limits.max_events = static_cast<uint32_t>(std::max(1.0, num("maxEvents", o.limits.max_events)));
      o.limits.max_bytes = static_cast<size_t>(std::max(1.0, num("maxBytes", static_cast<double>(o.limits.max_bytes))));
    }
    index_ = std::make_unique<BlockIndex>(o);
  }

 private:
  uint32_t SlotArg(const Napi::CallbackInfo& info, size_t i) {
    if (!info[i].IsNumber()) kvglue::ThrowType(info.Env(), "worker slot must be a number");
    const double d = info[i].As<Napi::Number>().DoubleValue();
    if (!(d >= 0 && d < 4096 && d == std::floor(d))) kvglue::ThrowRange(info.Env(), "worker slot must be 0..4095");
    return static_cast<uint32_t>(d);
  }
  uint8_t TierArg(const Napi::CallbackInfo& info, size_t i) {
    const double d = info[i].IsNumber() ? info[i].As<Napi::Number>().DoubleValue() : -1;
    if (!(d >= 0 && d <= 3 && d == std::floor(d))) kvglue::ThrowRange(info.Env(), "tier must be 0..3");
    return static_cast<uint8_t>(d);
  }
  kvglue::View<double> CountsArg(const Napi::CallbackInfo& info, size_t i, size_t need) {
    auto v = kvglue::TypedArg<double>(info, i, "out", napi_float64_array, "Float64Array");
    if (v.length < need) kvglue::ThrowRange(info.Env(), "out is too short");
    return v;
  }
  kvglue::View<const int64_t> HashesArg(const Napi::CallbackInfo& info, size_t i) {
    return kvglue::TypedArg<const int64_t>(info, i, "hashes", napi_bigint64_array, "BigInt64Array");
  }

  // applyFrame(slot, payload, out: Float64Array(16)) -> null | { error, kind } | { bad: [...] }
  Napi::Value ApplyFrame(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const uint32_t w = SlotArg(info, 0);
    auto payload = kvglue::BytesArg(info, 1, "payload");
    auto out = CountsArg(info, 2, kCountFields);
    ApplyCounts c;
    const bool ok = index_->apply_frame(w, payload.data, payload.length, c);
    const auto& b = index_->last_batch();
    WriteFrame(c, b, out.data);
    return FrameVerdict(env, ok, b);
  }

  // applyFrameColumns(slot, payload, out: Float64Array(16), columns: Uint8Array) applies the frame
  // as applyFrame does and returns its events as decodeKvEventBatchInto(payload, columns, true)
  // would (batch_js.h), from the one decode: for a consumer whose listeners want the events too.
  // -(bytes needed) when `columns` is too small: the frame is applied all the same.
  Napi::Value ApplyFrameColumns(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const uint32_t w = SlotArg(info, 0);
    auto payload = kvglue::BytesArg(info, 1, "payload");
    auto out = CountsArg(info, 2, kCountFields);
    auto cols = kvglue::TypedArg<uint8_t>(info, 3, "columns", napi_uint8_array, "Uint8Array");
    ApplyCounts c;
    const bool ok = index_->apply_frame(w, payload.data, payload.length, c, true);
    const auto& b = index_->last_batch();
    WriteFrame(c, b, out.data);
    if (!ok) return kvglue::BatchErrorObject(env, b);
    return kvglue::WriteBatchColumns(env, b, cols.data, cols.length);
  }

  // null when the frame applied with no bad event, else {error, kind} or {bad: [...]}.
  static Napi::Value FrameVerdict(Napi::Env env, bool ok, const kv::events::Batch& b) {
    if (!ok) return kvglue::BatchErrorObject(env, b);
    if (b.bad.empty()) return env.Null();
    auto r = Napi::Object::New(env);
    r.Set("bad", kvglue::BadEventsArray(env, b));
    return r;
  }

  // applyFrames(slots: Uint32Array, payloads: Uint8Array[], out: Float64Array(16 per frame))
  //   -> null when every frame applied with no bad event, else an array of applyFrame's verdicts.
  Napi::Value ApplyFrames(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto slots = kvglue::TypedArg<const uint32_t>(info, 0, "slots", napi_uint32_array, "Uint32Array");
    if (!info[1].IsArray()) kvglue::ThrowType(env, "payloads must be an array of Uint8Array");
    auto list = info[1].As<Napi::Array>();
    const size_t k = slots.length;
    if (list.Length() != k) kvglue::ThrowRange(env, "payloads and slots differ in length");
    auto out = CountsArg(info, 2, kCountFields * k);
    frames_in_.resize(k);
    for (size_t i = 0; i < k; ++i) {
      const uint32_t w = slots.data[i];
      if (w >= 4096) kvglue::ThrowRange(env, "worker slot must be 0..4095");
      Napi::Value v = list[i];
      auto u8 = kvglue::TypedValue<const uint8_t>(env, v, "payloads", napi_uint8_array, "Uint8Array or Buffer",
                                                  static_cast<long>(i));
      frames_in_[i] = {w, u8.data, u8.length};
    }
    counts_.assign(k, ApplyCounts{});
    if (k > ok_size_) ok_.reset(new bool[ok_size_ = k]);
    index_->apply_frames(frames_in_.data(), k, counts_.data(), ok_.get());
    bool plain = true;
    for (size_t i = 0; i < k; ++i) {
      const auto& b = index_->frame_batch(i);
      double* o = out.data + kCountFields * i;
      WriteFrame(counts_[i], b, o);
      plain = plain && ok_[i] && b.bad.empty();
    }
    if (plain) return env.Null();
    auto r = Napi::Array::New(env, k);
    for (size_t i = 0; i < k; ++i) r[i] = FrameVerdict(env, ok_[i], index_->frame_batch(i));
    return r;
  }

  // store(slot, tier, hashes, hasParent, parent: bigint, out)
  Napi::Value Store(const Napi::CallbackInfo& info) {
    const uint32_t w = SlotArg(info, 0);
    const uint8_t t = TierArg(info, 1);
    auto h = HashesArg(info, 2);
    const bool hp = info[3].ToBoolean().Value();
    int64_t parent = 0;
    if (hp) {
      if (!info[4].IsBigInt()) kvglue::ThrowType(info.Env(), "parent must be a bigint");
      bool lossless;
      parent = info[4].As<Napi::BigInt>().Int64Value(&lossless);
    }
    auto out = CountsArg(info, 5, kCountFields);
    ApplyCounts c;
    index_->store(w, t, h.data, h.length, hp, parent, c);
    WriteCounts(c, out.data);
    return info.Env().Undefined();
  }

  Napi::Value Remove(const Napi::CallbackInfo& info) {
    const uint32_t w = SlotArg(info, 0);
    const uint8_t t = TierArg(info, 1);
    auto h = HashesArg(info, 2);
    auto out = CountsArg(info, 3, kCountFields);
    ApplyCounts c;
    index_->remove(w, t, h.data, h.length, c);
    WriteCounts(c, out.data);
    return info.Env().Undefined();
  }

  Napi::Value Clear(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(index_->clear(SlotArg(info, 0))));
  }

  // overlapInto(hashes, out: Int32Array) -> int32s written, or -(int32s needed).
  // Layout: [workers, requestBlocks, sharedHits, nRanges, perTier[w*4], tiered[w*4], ranges[2*n]].
  Napi::Value OverlapInto(const Napi::CallbackInfo& info) {
    auto h = HashesArg(info, 0);
    auto out = kvglue::TypedArg<int32_t>(info, 1, "out", napi_int32_array, "Int32Array");
    index_->overlap(h.data, h.length, ov_);
    const size_t nw = ov_.workers, nr = ov_.shared_ranges.size();
    const size_t need = 4 + nw * 8 + nr * 2;
    if (need > out.length) return Napi::Number::New(info.Env(), -static_cast<double>(need));
    int32_t* o = out.data;
    o[0] = static_cast<int32_t>(nw);
    o[1] = static_cast<int32_t>(ov_.request_blocks);
    o[2] = ov_.shared_hits;
    o[3] = static_cast<int32_t>(nr);
    std::copy(ov_.per_tier.begin(), ov_.per_tier.end(), o + 4);
    std::copy(ov_.tiered.begin(), ov_.tiered.end(), o + 4 + nw * 4);
    for (size_t i = 0; i < nr; ++i) {
      o[4 + nw * 8 + 2 * i] = ov_.shared_ranges[i].first;
      o[4 + nw * 8 + 2 * i + 1] = ov_.shared_ranges[i].second;
    }
    return Napi::Number::New(info.Env(), static_cast<double>(need));
  }

  // scoreInto(hashes, candidates: Uint32Array (slots; 0xffffffff = unknown),
  //           params: Float64Array [blockSize, 9 config fields, 4 load fields per candidate],
  //           out: Float64Array(6 per candidate)). Few arguments: it runs once per routed request.
  Napi::Value ScoreInto(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    auto h = HashesArg(info, 0);
    auto cand = kvglue::TypedArg<const uint32_t>(info, 1, "candidates", napi_uint32_array, "Uint32Array");
    auto params = kvglue::TypedArg<const double>(info, 2, "params", napi_float64_array, "Float64Array");
    auto out = kvglue::TypedArg<double>(info, 3, "out", napi_float64_array, "Float64Array");
    const size_t nc = cand.length;
    if (params.length < 10 + nc * 4 || out.length < nc * 6) kvglue::ThrowRange(env, "scoreInto: short arrays");
    const double block_size = params.data[0];
    if (!(block_size > 0)) kvglue::ThrowRange(env, "blockSize must be positive");
    const double* cfg = params.data + 1;
    const double* loads = params.data + 10;
    kv::index::ScoringConfig c;
    c.overlap_score_credit = cfg[0];
    c.overlap_score_credit_decay = cfg[1];
    c.prefill_load_scale = cfg[2];
    c.host_cache_hit_weight = cfg[3];
    c.disk_cache_hit_weight = cfg[4];
    c.shared_cache_multiplier = cfg[5];
    c.decode_active_request_weight = cfg[6];
    c.track_prefill_tokens = cfg[7] != 0;
    c.external_as_disk = cfg[8] != 0;
    lw_.resize(nc);
    sc_.resize(nc);
    for (size_t k = 0; k < nc; ++k) lw_[k] = {loads[4 * k], loads[4 * k + 1], loads[4 * k + 2], loads[4 * k + 3] != 0};
    index_->overlap(h.data, h.length, ov_);
    index_->score(ov_, cand.data, nc, block_size, lw_.data(), c, sc_.data());
    for (size_t k = 0; k < nc; ++k) {
      const auto& s = sc_[k];
      double* o = out.data + 6 * k;
      o[0] = s.logit;
      o[1] = s.credit;
      o[2] = s.device;
      o[3] = s.host;
      o[4] = s.disk;
      o[5] = s.shared_beyond;
    }
    return env.Undefined();
  }

  Napi::Value Lookup(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsBigInt()) kvglue::ThrowType(env, "hash must be a bigint");
    bool lossless;
    const int64_t h = info[0].As<Napi::BigInt>().Int64Value(&lossless);
    auto r = index_->lookup(h);
    if (!r.found) return env.Null();
    auto o = Napi::Object::New(env);
    o.Set("hash", Napi::BigInt::New(env, r.hash));
    o.Set("parent", r.has_parent ? Napi::Value(Napi::BigInt::New(env, r.parent)) : env.Null());
    o.Set("tokenHash", r.has_token_hash ? Napi::Value(Napi::BigInt::New(env, r.token_hash)) : env.Null());
    auto m = Napi::Uint8Array::New(env, r.masks.size());
    std::copy(r.masks.begin(), r.masks.end(), m.Data());
    o.Set("masks", m);
    return o;
  }

  // workerStats(slot, out: Float64Array(kWorkerStatFields)): shared_tables.h's worker counters, in
  // its order (blocks per tier, bad events per kind, refused batches per error, then the rest).
  Napi::Value WorkerStatsFn(const Napi::CallbackInfo& info) {
    const uint32_t w = SlotArg(info, 0);
    auto out = CountsArg(info, 1, kWorkerStatFields);
    const auto& s = index_->worker_stats(w);
    double* o = out.data;
    for (uint64_t v : s.tier_blocks) *o++ = static_cast<double>(v);
    for (uint64_t v : s.bad_events) *o++ = static_cast<double>(v);
    for (uint64_t v : s.bad_batches) *o++ = static_cast<double>(v);
#define KV_WORKER_COUNTER(id) *o++ = static_cast<double>(s.id);
    KV_WORKER_COUNTERS(KV_WORKER_COUNTER)
#undef KV_WORKER_COUNTER
    return info.Env().Undefined();
  }

  Napi::Value Blocks(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(index_->blocks()));
  }
  Napi::Value MemoryBytes(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), static_cast<double>(index_->memory_bytes()));
  }

  std::unique_ptr<BlockIndex> index_;
  std::vector<BlockIndex::FrameIn> frames_in_;
  std::vector<ApplyCounts> counts_;
  std::unique_ptr<bool[]> ok_;
  size_t ok_size_ = 0;
  kv::index::Overlap ov_;
  std::vector<kv::index::WorkerLoad> lw_;
  std::vector<kv::index::WorkerScore> sc_;
};

}  // namespace

// threadCpuTimeUs() -> CPU time of the calling thread in microseconds (CLOCK_THREAD_CPUTIME_ID):
// benchmarks on a shared machine time work with it, so time spent descheduled does not count.
Napi::Value ThreadCpuTimeUs(const Napi::CallbackInfo& info) {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return Napi::Number::New(info.Env(), static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3);
}

// intRunPath() -> the token-id run path this host uses ("avx512", "avx2" or "scalar"):
// benchmarks print it, since it sets the decoder's speed more than anything else on the machine.
Napi::Value IntRunPath(const Napi::CallbackInfo& info) {
  const auto p = kv::mp::int_run_path();
  return Napi::String::New(info.Env(), p == kv::mp::IntRunPath::Avx512 ? "avx512"
                                       : p == kv::mp::IntRunPath::Avx2 ? "avx2"
                                                                       : "scalar");
}

void RegisterIndex(Napi::Env env, Napi::Object exports) {
  exports.Set("KvBlockIndex", IndexWrap::Define(env));
  exports.Set("threadCpuTimeUs", Napi::Function::New(env, ThreadCpuTimeUs, "threadCpuTimeUs"));
  exports.Set("intRunPath", Napi::Function::New(env, IntRunPath, "intRunPath"));
}

// Glue for the KV-event decoder (native/events): one call decodes a whole payload into flat
// columns in a caller-owned buffer, for tools and tests that want the events themselves (the
// index applies frames without this; see index.cpp).
#include <napi.h>

#include <cmath>
#include <cstring>

#include "../events/event_batch.h"
#include "args.h"
#include "batch_js.h"

namespace {

using kv::events::Batch;

size_t align8(size_t n) {
  return (n + 7) & ~size_t(7);
}

Napi::Value OptStrValue(Napi::Env env, const kv::events::OptStr& s) {
  return s.present ? Napi::String::New(env, std::string(s.value)) : env.Null();
}

// decodeKvEventBatchInto(payload: Uint8Array, out: Uint8Array, wantTokens: boolean)
//   -> bytes written (>= 0) | -(bytes needed) when `out` is too small
//      | { bytes, extras, bad } when some event was bad or carried optional strings
//      | { error, kind } when the batch itself cannot be decoded.
// `out` (8-byte aligned, reused by the caller across calls) receives the columns:
//   f64[8] header [ts, dpRank (NaN = null), form (0 array, 1 map), count, nHashes, nTokens, 0, 0],
//   then, each section 8-byte aligned: kinds u8[count], tiers u8[count], hasParent u8[count],
//   flags u8[count] (bit0 bigram, bit1 medium present), blockSizes i32[count],
//   hashOffsets u32[count+1], tokenOffsets u32[count+1], parents i64[count], hashes i64[nHashes],
//   tokens u32[nTokens].
Napi::Value DecodeKvEventBatchInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2) kvglue::ThrowType(env, "decodeKvEventBatchInto: payload and out are required");
  auto payload = kvglue::BytesArg(info, 0, "payload");
  auto out_arr = kvglue::TypedArg<uint8_t>(info, 1, "out", napi_uint8_array, "Uint8Array");
  const bool want_tokens = info.Length() > 2 && info[2].ToBoolean().Value();
  thread_local Batch b;
  kv::events::Limits limits;
  if (!kv::events::decode_batch(payload.data, payload.length, limits, want_tokens, b))
    return kvglue::BatchErrorObject(env, b);
  const size_t n = b.events.size();
  size_t need = 64;
  const size_t o_kinds = need;
  need += align8(n);
  const size_t o_tiers = need;
  need += align8(n);
  const size_t o_has_parent = need;
  need += align8(n);
  const size_t o_flags = need;
  need += align8(n);
  const size_t o_block_sizes = need;
  need += align8(n * 4);
  const size_t o_hash_offsets = need;
  need += align8((n + 1) * 4);
  const size_t o_token_offsets = need;
  need += align8((n + 1) * 4);
  const size_t o_parents = need;
  need += n * 8;
  const size_t o_hashes = need;
  need += b.hashes.size() * 8;
  const size_t o_tokens = need;
  need += align8(b.tokens.size() * 4);
  if (need > out_arr.length) return Napi::Number::New(env, -static_cast<double>(need));
  uint8_t* out = out_arr.data;
  double header[8] = {b.ts,
                      b.has_dp ? static_cast<double>(b.dp) : std::nan(""),
                      b.map_form ? 1.0 : 0.0,
                      static_cast<double>(n),
                      static_cast<double>(b.hashes.size()),
                      static_cast<double>(b.tokens.size()),
                      0,
                      0};
  std::memcpy(out, header, sizeof header);
  bool any_extras = false;
  static const char* canon[] = {"GPU", "CPU_PINNED", "DISK", "EXTERNAL"};
  for (size_t i = 0; i < n; ++i) {
    const auto& e = b.events[i];
    out[o_kinds + i] = e.kind;
    out[o_tiers + i] = e.tier;
    out[o_has_parent + i] = e.has_parent ? 1 : 0;
    out[o_flags + i] = (e.bigram ? 1 : 0) | (e.medium.present ? 2 : 0);
    std::memcpy(out + o_block_sizes + 4 * i, &e.block_size, 4);
    std::memcpy(out + o_hash_offsets + 4 * i, &e.hash_begin, 4);
    std::memcpy(out + o_token_offsets + 4 * i, &e.tok_begin, 4);
    std::memcpy(out + o_parents + 8 * i, &e.parent, 8);
    const bool medium_canon = !e.medium.present || e.medium.value == canon[e.tier];
    if (e.cache_salt.present || e.session_id.present || e.lora_name.present || e.has_lora_id || !medium_canon)
      any_extras = true;
  }
  const uint32_t hend = static_cast<uint32_t>(b.hashes.size()), tend = static_cast<uint32_t>(b.tokens.size());
  std::memcpy(out + o_hash_offsets + 4 * n, &hend, 4);
  std::memcpy(out + o_token_offsets + 4 * n, &tend, 4);
  if (!b.hashes.empty()) std::memcpy(out + o_hashes, b.hashes.data(), b.hashes.size() * 8);
  if (!b.tokens.empty()) std::memcpy(out + o_tokens, b.tokens.data(), b.tokens.size() * 4);
  if (!any_extras && b.bad.empty()) return Napi::Number::New(env, static_cast<double>(need));
  // Optional strings other than a canonical medium, and bad events: the slow (rare) path.
  auto r = Napi::Object::New(env);
  r.Set("bytes", static_cast<double>(need));
  auto extras = Napi::Array::New(env);
  uint32_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto& e = b.events[i];
    if (!(e.medium.present || e.cache_salt.present || e.session_id.present || e.lora_name.present || e.has_lora_id))
      continue;
    auto o = Napi::Object::New(env);
    o.Set("index", static_cast<double>(i));
    o.Set("medium", OptStrValue(env, e.medium));
    o.Set("cacheSalt", OptStrValue(env, e.cache_salt));
    o.Set("sessionId", OptStrValue(env, e.session_id));
    o.Set("loraName", OptStrValue(env, e.lora_name));
    o.Set("loraId", e.has_lora_id ? Napi::Number::New(env, static_cast<double>(e.lora_id)) : env.Null());
    extras[k++] = o;
  }
  r.Set("extras", extras);
  r.Set("bad", kvglue::BadEventsArray(env, b));
  return r;
}

}  // namespace

void RegisterEvents(Napi::Env env, Napi::Object exports) {
  exports.Set("decodeKvEventBatchInto", Napi::Function::New(env, DecodeKvEventBatchInto, "decodeKvEventBatchInto"));
}

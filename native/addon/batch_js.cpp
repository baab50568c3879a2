// The decoded batch as JavaScript sees it (batch_js.h).
#include "batch_js.h"

#include <cmath>
#include <cstring>

namespace kvglue {

using kv::events::Batch;

namespace {

size_t align8(size_t n) {
  return (n + 7) & ~size_t(7);
}

Napi::Value OptStrValue(Napi::Env env, const kv::events::OptStr& s) {
  return s.present ? Napi::String::New(env, std::string(s.value)) : env.Null();
}

}  // namespace

Napi::Value WriteBatchColumns(Napi::Env env, const Batch& b, uint8_t* out, size_t cap) {
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
  if (need > cap) return Napi::Number::New(env, -static_cast<double>(need));
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
  static const char* canon[] = {KV_TIERS(KV_TABLE_NAME)};
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
  r.Set("bad", BadEventsArray(env, b));
  return r;
}

}  // namespace kvglue

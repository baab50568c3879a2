// What JavaScript sees of a decoded batch, shared by the decoder's glue (events.cpp) and the
// index's (index.cpp): a refused batch as {error, kind}, its bad events as
// [{index, kind, reason}], and the batch itself as flat columns.
#pragma once
#include <napi.h>

#include "../events/event_batch.h"

namespace kvglue {

inline Napi::Object BatchErrorObject(Napi::Env env, const kv::events::Batch& b) {
  auto r = Napi::Object::New(env);
  r.Set("error", b.error_text);
  r.Set("kind", kv::events::batch_error_name(b.error));
  return r;
}

inline Napi::Array BadEventsArray(Napi::Env env, const kv::events::Batch& b) {
  auto bad = Napi::Array::New(env, b.bad.size());
  for (size_t i = 0; i < b.bad.size(); ++i) {
    auto o = Napi::Object::New(env);
    o.Set("index", static_cast<double>(b.bad[i].index));
    o.Set("kind", kv::events::bad_kind_name(b.bad[i].kind));
    o.Set("reason", b.bad[i].reason);
    bad[i] = o;
  }
  return bad;
}

// Writes the batch's columns into `out` (8-byte aligned, `cap` bytes, reused by the caller):
//   f64[8] header [ts, dpRank (NaN = null), form (0 array, 1 map), count, nHashes, nTokens, 0, 0],
//   then, each section 8-byte aligned: kinds u8[count], tiers u8[count], hasParent u8[count],
//   flags u8[count] (bit0 bigram, bit1 medium present), blockSizes i32[count],
//   hashOffsets u32[count+1], tokenOffsets u32[count+1], parents i64[count], hashes i64[nHashes],
//   tokens u32[nTokens].
// Returns the bytes written, -(bytes needed) when `cap` is too small, or { bytes, extras, bad }
// when some event was bad or carried optional strings.
Napi::Value WriteBatchColumns(Napi::Env env, const kv::events::Batch& b, uint8_t* out, size_t cap);

}  // namespace kvglue

// Glue for the KV-event decoder (native/events): one call decodes a whole payload into flat
// columns in a caller-owned buffer, for tools and tests that want the events themselves (the
// index applies frames without this; see index.cpp).
#include <napi.h>

#include "../events/event_batch.h"
#include "args.h"
#include "batch_js.h"

namespace {

using kv::events::Batch;

// decodeKvEventBatchInto(payload: Uint8Array, out: Uint8Array, wantTokens: boolean)
//   -> WriteBatchColumns' result (batch_js.h: the columns' layout)
//      | { error, kind } when the batch itself cannot be decoded.
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
  return kvglue::WriteBatchColumns(env, b, out_arr.data, out_arr.length);
}

}  // namespace

void RegisterEvents(Napi::Env env, Napi::Object exports) {
  exports.Set("decodeKvEventBatchInto", Napi::Function::New(env, DecodeKvEventBatchInto, "decodeKvEventBatchInto"));
}

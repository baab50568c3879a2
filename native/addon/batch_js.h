// What JavaScript sees of a decoded batch's problems, shared by the decoder's glue (events.cpp)
// and the index's (index.cpp): a refused batch as {error, kind}, and its bad events as
// [{index, kind, reason}].
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

}  // namespace kvglue

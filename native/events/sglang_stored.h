// The decoder's fast path for the event that makes up nearly all of a KV-event stream: a
// BlockStored exactly as SGLang's msgspec encoder lays it out (keys in declaration order, 64-bit
// hashes, plain token ids, lora_id nil, a medium or none), read in one pass straight into the
// batch. Anything else, or anything the general path would refuse or report, is left to it.
#pragma once
#include "event_batch.h"
#include "msgpack_reader.h"

namespace kv::events {

// Appends the event `r` is positioned at to `b` and steps over it, as the general path would;
// false with `r` and `b` untouched when the event is not of that exact, valid form.
bool decode_sglang_stored(mp::Reader& r, bool want_tokens, Batch& b);

}  // namespace kv::events

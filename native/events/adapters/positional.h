// Shared walk over a positional event [tag, f1, f2, ...] for the positional adapters.
#pragma once
#include <string>

#include "adapter.h"

namespace kv::events {

constexpr uint32_t kMaxPositional = 16;  // fields beyond this are ignored

struct Positional {
  uint32_t n = 0;  // fields on the wire
  mp::Reader at[kMaxPositional];
  std::string_view tag;
};

// Splits the event into field readers; false (with err) when it is no tagged array.
bool split_positional(mp::Reader& ev, Positional& p, EventError& err);

// The fields every engine's positional form shares: tag, hashes, parent, tokens, block_size,
// lora_id, medium. Fills f for BlockStored / BlockRemoved / AllBlocksCleared.
bool common_positional(const Positional& p, RawFields& f, EventError& err);

}  // namespace kv::events

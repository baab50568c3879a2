// vLLM's positional events: position 7 is lora_name; later positions (extra keys, group index,
// cache spec kind, ...) carry nothing the index uses.
#include "positional.h"

namespace kv::events {
namespace {

bool claims(const mp::Reader& ev) {
  return ev.peek() == mp::Type::Array;
}

bool fields(mp::Reader& ev, RawFields& f, EventError& err) {
  Positional p;
  if (!split_positional(ev, p, err) || !common_positional(p, f, err)) return false;
  if (f.kind == kStored && p.n > 7) f.lora_name = p.at[7];
  return true;
}

const EventAdapter kAdapter{"vllm-positional", claims, fields};

}  // namespace

const EventAdapter& vllm_positional_adapter() {
  return kAdapter;
}

}  // namespace kv::events

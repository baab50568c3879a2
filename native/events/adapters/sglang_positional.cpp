// SGLang's older positional events: position 7 is a metadata map {cache_salt, session_id}.
#include "positional.h"

namespace kv::events {
namespace {

// Position 7 of a positional event (a default Reader when there is none).
mp::Reader field7(mp::Reader ev) {
  uint32_t n;
  if (!ev.read_array(n) || n < 8) return {};
  for (int i = 0; i < 7; ++i)
    if (!ev.skip()) return {};
  mp::Reader v;
  ev.take(v);
  return v;
}

bool claims(const mp::Reader& ev) {
  if (ev.peek() != mp::Type::Array) return false;
  mp::Reader probe = ev;
  uint32_t n;
  if (!probe.read_array(n) || n > 8) return false;
  const mp::Type t = field7(ev).peek();
  return t == mp::Type::Invalid || t == mp::Type::Nil || t == mp::Type::Map;
}

bool fields(mp::Reader& ev, RawFields& f, EventError& err) {
  Positional p;
  if (!split_positional(ev, p, err) || !common_positional(p, f, err)) return false;
  if (f.kind != kStored || p.n < 8 || p.at[7].peek() != mp::Type::Map) return true;
  for_each_field(p.at[7], [&f](std::string_view k, const mp::Reader& v) {
    if (k == "cache_salt") f.cache_salt = v;
    else if (k == "session_id") f.session_id = v;
    else if (k == "lora_name") f.lora_name = v;
  });
  return true;
}

const EventAdapter kAdapter{"sglang-positional", claims, fields};

}  // namespace

const EventAdapter& sglang_positional_adapter() {
  return kAdapter;
}

}  // namespace kv::events

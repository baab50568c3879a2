// SGLang 0.5.23's events: msgspec tagged structs encoded as maps {"type": tag, field: value...}
// with None fields omitted. vLLM's map form is the same encoding of the same structs.
#include "../stored_keys.h"
#include "adapter.h"

namespace kv::events {
namespace {

bool claims(const mp::Reader& ev) {
  return ev.peek() == mp::Type::Map;
}

// msgspec writes a struct's fields in declaration order, so SGLang's BlockStored always opens
// with these six keys in this order (the optional fields follow). Matching each key's bytes at
// once replaces reading and dispatching it; an event laid out any other way (or broken inside
// these six) is read by the general loop from its start.
constexpr uint32_t kInOrder = 6;

bool stored_in_order(mp::Reader& ev, RawFields& f) {
  using namespace stored_keys;
  return ev.consume(kHead) && ev.take(f.hashes) && ev.consume(kParent) && ev.take(f.parent) && ev.consume(kTokens) &&
         take_tokens(ev, f) && ev.consume(kBlockSize) && ev.take(f.block_size) && ev.consume(kLoraId) &&
         ev.take(f.lora_id);
}

bool fields(mp::Reader& ev, RawFields& f, EventError& err) {
  uint32_t n;
  ev.read_map(n);
  std::string_view tag;
  bool has_tag = false;
  mp::Reader meta;
  uint32_t i = 0;
  if (n >= kInOrder) {
    const mp::Reader start = ev;
    if (stored_in_order(ev, f)) {
      tag = "BlockStored";
      has_tag = true;
      i = kInOrder;
    } else {
      ev = start;
      f = RawFields();
    }
  }
  for (; i < n; ++i) {
    std::string_view k;
    const bool is_str = ev.read_str(k);
    if (!is_str && !ev.skip()) break;
    if (is_str && k == "token_ids") {
      if (!take_tokens(ev, f)) return false;
      continue;
    }
    mp::Reader v;
    if (!ev.take(v)) {
      err = {BadKind::Fields, "event field is truncated or too deep"};
      return false;
    }
    if (!is_str) continue;
    // One pass over the keys, switched on length (SGLang's map events carry 6-9 of them).
    switch (k.size()) {
      case 4:
        if (k == "type") has_tag = v.read_str(tag);
        break;
      case 6:
        if (k == "medium") f.medium = v;
        break;
      case 7:
        if (k == "lora_id") f.lora_id = v;
        break;
      case 8:
        if (k == "metadata") meta = v;
        break;
      case 9:
        if (k == "lora_name") f.lora_name = v;
        break;
      case 10:
        if (k == "block_size") f.block_size = v;
        else if (k == "cache_salt") f.cache_salt = v;
        else if (k == "session_id") f.session_id = v;
        break;
      case 12:
        if (k == "block_hashes") f.hashes = v;
        break;
      case 17:
        if (k == "parent_block_hash") f.parent = v;
        break;
      default:
        break;
    }
  }
  if (!has_tag) {
    err = {BadKind::UnknownTag, "unknown event tag (no type)"};
    return false;
  }
  if (tag == "BlockStored") f.kind = kStored;
  else if (tag == "BlockRemoved") f.kind = kRemoved;
  else if (tag == "AllBlocksCleared") f.kind = kCleared;
  else {
    err = {BadKind::UnknownTag, "unknown event tag '" + std::string(tag.substr(0, 40)) + "'"};
    return false;
  }
  if (f.kind == kStored && meta.peek() == mp::Type::Map) {
    // Older 0.5.x builds nest {cache_salt, session_id} in metadata; top-level fields win.
    for_each_field(meta, [&f](std::string_view k, const mp::Reader& v) {
      const bool unset_salt = f.cache_salt.remaining() == 0 || f.cache_salt.peek() == mp::Type::Nil;
      const bool unset_session = f.session_id.remaining() == 0 || f.session_id.peek() == mp::Type::Nil;
      if (k == "cache_salt" && unset_salt) f.cache_salt = v;
      else if (k == "session_id" && unset_session) f.session_id = v;
    });
  }
  return true;
}

const EventAdapter kAdapter{"tagged-map", claims, fields};

}  // namespace

const EventAdapter& tagged_map_adapter() {
  return kAdapter;
}

}  // namespace kv::events

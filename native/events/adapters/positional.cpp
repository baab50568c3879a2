#include "positional.h"

namespace kv::events {

bool split_positional(mp::Reader& ev, Positional& p, EventError& err) {
  uint32_t n;
  if (!ev.read_array(n) || n == 0 || ev.peek() != mp::Type::Str) {
    err = {BadKind::UnknownTag, "event array without a tag"};
    return false;
  }
  p.n = n;
  for (uint32_t i = 0; i < n; ++i) {
    mp::Reader scratch;
    if (!ev.take(i < kMaxPositional ? p.at[i] : scratch)) {
      err = {BadKind::Fields, "event field " + std::to_string(i) + " is truncated or too deep"};
      return false;
    }
  }
  mp::Reader tag = p.at[0];
  tag.read_str(p.tag);
  return true;
}

bool common_positional(const Positional& p, RawFields& f, EventError& err) {
  if (p.tag == "BlockStored") {
    if (p.n < 5) {
      err = {BadKind::Fields, "BlockStored has " + std::to_string(p.n) + " fields, needs >= 5"};
      return false;
    }
    f.kind = kStored;
    f.hashes = p.at[1];
    f.parent = p.at[2];
    f.tokens = p.at[3];
    f.block_size = p.at[4];
    if (p.n > 5) f.lora_id = p.at[5];
    if (p.n > 6) f.medium = p.at[6];
    return true;
  }
  if (p.tag == "BlockRemoved") {
    if (p.n < 2) {
      err = {BadKind::Fields, "BlockRemoved without block_hashes"};
      return false;
    }
    f.kind = kRemoved;
    f.hashes = p.at[1];
    if (p.n > 2) f.medium = p.at[2];
    return true;
  }
  if (p.tag == "AllBlocksCleared") {
    f.kind = kCleared;
    return true;
  }
  err = {BadKind::UnknownTag, "unknown event tag '" + std::string(p.tag.substr(0, 40)) + "'"};
  return false;
}

}  // namespace kv::events

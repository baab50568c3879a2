#include "mooncake.h"

namespace kv {

void mooncake_object_keys(const std::string& hex, const MooncakeLayout& l, std::vector<std::string>& out) {
  const std::string key = l.prefix.empty() ? hex : l.prefix + "_" + hex;
  const bool pp = l.pp_size > 1;
  if (l.mla) {
    out.push_back(key + "_" + (pp ? std::to_string(l.pp_rank) : std::string()) + "_k");
    return;
  }
  auto add = [&](uint32_t rank) {
    std::string suffix = std::to_string(rank);
    if (pp) suffix += "_" + std::to_string(l.pp_rank);
    out.push_back(key + "_" + suffix + "_k");
    out.push_back(key + "_" + suffix + "_v");
  };
  if (l.split_factor > 0) {
    for (uint32_t i = 0; i < l.split_factor; ++i) add(l.tp_rank * l.split_factor + i);
  } else {
    add(l.tp_rank);
  }
}

}  // namespace kv

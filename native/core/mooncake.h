// Mooncake Store object keys for HiCache pages (SGLang mem_cache/storage/mooncake_store):
//   logical key = "{prefix}_{hex}" when a config prefix (extra_backend_tag / model name) is set;
//   MHA: "{key}_{tp}_k", "{key}_{tp}_v" (with pipeline parallelism "{key}_{tp}_{pp}_k|v";
//        split heads: one k/v pair per target rank tp*split .. tp*split+split-1);
//   MLA: "{key}__k" (with pp: "{key}_{pp}_k").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kv {

struct MooncakeLayout {
  std::string prefix;    // "" = none
  bool mla = false;
  uint32_t tp_rank = 0;
  uint32_t pp_rank = 0;
  uint32_t pp_size = 1;  // > 1 adds the pp rank
  uint32_t split_factor = 0;  // should_split_heads: tp_lcm_size / tp_size; 0 = off
};

// Object keys of one page, in SGLang's order.
void mooncake_object_keys(const std::string& hex, const MooncakeLayout& l, std::vector<std::string>& out);

}  // namespace kv

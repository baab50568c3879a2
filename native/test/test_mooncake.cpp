// Mooncake object key layouts (SGLang mooncake_store.py _get_mha/_get_mla_buffer_meta).
#include <string>
#include <vector>

#include "check.h"
#include "mooncake.h"

using namespace kv;

TEST_CASE(mooncake, layouts) {
  std::vector<std::string> k;
  MooncakeLayout l;
  l.tp_rank = 3;
  mooncake_object_keys("ab", l, k);
  CHECK(k == (std::vector<std::string>{"ab_3_k", "ab_3_v"}));
  k.clear();
  l.pp_size = 2;
  l.pp_rank = 1;
  mooncake_object_keys("ab", l, k);
  CHECK(k == (std::vector<std::string>{"ab_3_1_k", "ab_3_1_v"}));
  k.clear();
  l.mla = true;
  mooncake_object_keys("ab", l, k);
  CHECK(k == (std::vector<std::string>{"ab_1_k"}));
  k.clear();
  l.pp_size = 1;
  l.prefix = "tag_model";
  mooncake_object_keys("ab", l, k);
  CHECK(k == (std::vector<std::string>{"tag_model_ab__k"}));
  k.clear();
  l.mla = false;
  l.prefix.clear();
  l.split_factor = 2;
  mooncake_object_keys("ab", l, k);
  CHECK(k == (std::vector<std::string>{"ab_6_k", "ab_6_v", "ab_7_k", "ab_7_v"}));
}

// SGLang 0.5.23 namespace seeds and namespaced_block_hash against their definitions.
#include <cstring>
#include <string>

#include "check.h"
#include "sglang_chain.h"
#include "sglang_namespace.h"
#include "sha256.h"

using namespace kv;

TEST_CASE(namespace, seeds_follow_definition) {
  CHECK(!storage_namespace_seed(std::nullopt, std::nullopt));
  CHECK(!event_namespace_seed(std::nullopt, std::nullopt));
  // ("a", None) by hand: tag || 01 || le64(1) || "a" || 00
  const std::string tag = "sglang-cache-namespace-v1";
  std::string msg = tag + std::string("\x01\x01\0\0\0\0\0\0\0a\0", 11);
  uint8_t d[32];
  sha256(msg.data(), msg.size(), d);
  auto s = storage_namespace_seed(std::string("a"), std::nullopt);
  CHECK(s && std::memcmp(s->data(), d, 32) == 0);
  CHECK(*storage_namespace_seed(std::string("ab"), std::string("c")) !=
        *storage_namespace_seed(std::string("a"), std::string("bc")));
  CHECK(*event_namespace_seed(std::string("a"), std::nullopt) !=
        *storage_namespace_seed(std::string("a"), std::nullopt));
}

TEST_CASE(namespace, salt_seed_and_block_hash) {
  const std::string salt = "tenant-a";
  std::string msg = std::string("sglang-cache-salt-v1") + std::string(1, '\0') + salt;
  uint8_t d[32];
  sha256(msg.data(), msg.size(), d);
  CHECK(std::memcmp(cache_salt_seed(salt).data(), d, 32) == 0);

  Digest seed = cache_salt_seed(salt);
  const int64_t h = -96911884851298857LL;
  uint8_t buf[40];
  std::memcpy(buf, seed.data(), 32);
  const uint64_t u = uint64_t(h);
  for (int i = 0; i < 8; ++i) buf[32 + i] = uint8_t(u >> (56 - 8 * i));
  sha256(buf, 40, d);
  CHECK_EQ(namespaced_block_hash(h, seed), digest_to_int64(d));
}

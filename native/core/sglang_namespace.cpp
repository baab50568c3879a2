#include "sglang_namespace.h"

#include <cstring>

#include "sglang_chain.h"
#include "sha256.h"

namespace kv {

std::optional<Digest> namespace_seed(const char* tag, const std::optional<std::string>& extra_key,
                                     const std::optional<std::string>& cache_salt) {
  if (!extra_key && !cache_salt) return std::nullopt;
  Sha256 h;
  h.update(tag, std::strlen(tag));
  for (const auto* part : {&extra_key, &cache_salt}) {
    if (!*part) {
      h.update("\x00", 1);
      continue;
    }
    uint8_t head[9] = {1};
    const uint64_t n = (*part)->size();
    for (int i = 0; i < 8; ++i) head[1 + i] = uint8_t(n >> (8 * i));
    h.update(head, 9).update((*part)->data(), n);
  }
  Digest d;
  h.final(d.data());
  return d;
}

std::optional<Digest> storage_namespace_seed(const std::optional<std::string>& extra_key,
                                             const std::optional<std::string>& cache_salt) {
  return namespace_seed("sglang-cache-namespace-v1", extra_key, cache_salt);
}

std::optional<Digest> event_namespace_seed(const std::optional<std::string>& extra_key,
                                           const std::optional<std::string>& cache_salt) {
  return namespace_seed("sglang-kv-event-namespace-v1", extra_key, cache_salt);
}

Digest cache_salt_seed(const std::string& cache_salt) {
  static const char kTag[] = "sglang-cache-salt-v1";  // followed by its NUL byte
  Digest d;
  Sha256().update(kTag, sizeof(kTag)).update(cache_salt.data(), cache_salt.size()).final(d.data());
  return d;
}

int64_t namespaced_block_hash(int64_t h, const Digest& seed) {
  uint8_t be[8];
  const uint64_t u = static_cast<uint64_t>(h);
  for (int i = 0; i < 8; ++i) be[i] = uint8_t(u >> (56 - 8 * i));
  Digest d;
  Sha256().update(seed.data(), 32).update(be, 8).final(d.data());
  return digest_to_int64(d.data());
}

}  // namespace kv

// SGLang 0.5.23 namespacing of page hashes for requests with a cache_salt or an extra_key
// (LoRA id / caller namespace). Three separate things, mirrored from the release:
//  * storage chain seed (mem_cache/utils.py storage_namespace_seed): the prior digest the
//    node's hash_value / HiCache storage keys chain from;
//  * event chain seed (utils.py compute_node_event_hash_values): salted requests' event chains
//    start from SHA256("sglang-cache-salt-v1\0" + salt); extra_key does not seed them;
//  * event namespace (disaggregation/kv_events.py kv_event_namespace_seed +
//    namespaced_block_hash): each published int64 h becomes
//    int64_be(SHA256(seed || be64(h))[:8]).
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace kv {

using Digest = std::array<uint8_t, 32>;

// SHA256(tag || for part in (extra_key, cache_salt): 0x00 if absent else
// 0x01 || le64(len(utf8)) || utf8). nullopt when both parts are absent.
std::optional<Digest> namespace_seed(const char* tag, const std::optional<std::string>& extra_key,
                                     const std::optional<std::string>& cache_salt);
std::optional<Digest> storage_namespace_seed(const std::optional<std::string>& extra_key,
                                             const std::optional<std::string>& cache_salt);
std::optional<Digest> event_namespace_seed(const std::optional<std::string>& extra_key,
                                           const std::optional<std::string>& cache_salt);
Digest cache_salt_seed(const std::string& cache_salt);
int64_t namespaced_block_hash(int64_t h, const Digest& seed);

}  // namespace kv

// SGLang's BlockStored as msgspec writes it (a map, keys in declaration order): the msgpack bytes
// of its keys, shared by the tagged-map adapter's in-order match and the fast path
// (sglang_stored.cpp), so both read the one layout.
#pragma once
#include <string_view>

namespace kv::events::stored_keys {

// {"type": "BlockStored", "block_hashes": ...: the map's first key, its tag and the second key.
constexpr std::string_view kHead(
    "\xa4type\xab"
    "BlockStored\xac"
    "block_hashes");
constexpr std::string_view kParent("\xb1parent_block_hash");
constexpr std::string_view kTokens("\xa9token_ids");
constexpr std::string_view kBlockSize(
    "\xaa"
    "block_size");
constexpr std::string_view kLoraId("\xa7lora_id");
constexpr std::string_view kMedium("\xa6medium");
constexpr std::string_view kNil("\xc0");

}  // namespace kv::events::stored_keys

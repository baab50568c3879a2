// One interface for engine wire formats (llm-d's engineadapter idea): an adapter maps one event
// value of its engine's form onto engine-neutral raw fields; event_batch.cpp validates those and
// maps the medium onto a tier, once, for every engine. Each engine form lives in its own unit.
#pragma once
#include <string>

#include "../event_batch.h"
#include "../msgpack_reader.h"

namespace kv::events {

// Each field is a reader over exactly that field's value; an absent field is a default Reader
// (remaining() == 0), and a field that is msgpack nil counts as absent too.
struct RawFields {
  Kind kind = kCleared;
  mp::Reader hashes, parent, tokens, block_size, lora_id, medium, cache_salt, session_id, lora_name;
  // Set by take_tokens: token_ids already checked (plain uint32 list of `token_count`; the first
  // one that is not a uint32 at `token_bad`, or -1).
  bool tokens_checked = false;
  uint32_t token_count = 0;
  int64_t token_bad = -1;
};

// Takes a token_ids value, checking a plain list of uint32 in the same pass that steps over it
// (the hot field: thousands of ids a batch). Other shapes are taken as they are and checked later.
bool take_tokens(mp::Reader& ev, RawFields& f);

// Calls on(key, value) for each string-keyed entry of the map `meta` holds (SGLang's metadata
// {cache_salt, session_id, ...}); stops at an entry that is truncated or too deep.
template <typename On>
void for_each_field(mp::Reader meta, On on) {
  uint32_t m;
  if (!meta.read_map(m)) return;
  for (uint32_t i = 0; i < m; ++i) {
    std::string_view k;
    const bool is_str = meta.read_str(k);
    if (!is_str && !meta.skip()) break;
    mp::Reader v;
    if (!meta.take(v)) break;
    if (is_str) on(k, v);
  }
}

struct EventError {
  BadKind kind;
  std::string reason;
};

struct EventAdapter {
  const char* name;
  // Whether this adapter reads the event `event` is positioned at (it is not advanced).
  bool (*claims)(const mp::Reader& event);
  // Fills `f` from the event, stepping `event` over it; false with `err` set for an event of this
  // form that is malformed (the caller then skips the event from its start).
  bool (*fields)(mp::Reader& event, RawFields& f, EventError& err);
};

// SGLang 0.5.23's tagged maps {"type": "BlockStored", ...}; vLLM's map form is the same msgspec
// tagged struct, so it is read here too.
const EventAdapter& tagged_map_adapter();
// SGLang's older positional events: [tag, hashes, parent, tokens, block_size, lora_id, medium,
// {cache_salt, session_id}].
const EventAdapter& sglang_positional_adapter();
// vLLM's positional events: [tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name,
// ...further vLLM fields, ignored].
const EventAdapter& vllm_positional_adapter();

// The adapters in the order they are asked to claim an event.
const EventAdapter* const* all_adapters();

}  // namespace kv::events

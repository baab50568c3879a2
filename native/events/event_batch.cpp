#include "event_batch.h"

#include <algorithm>

#include "adapters/adapter.h"
#include "sglang_stored.h"

namespace kv::events {

const char* bad_kind_name(BadKind k) {
  static const char* names[] = {KV_BAD_EVENT_KINDS(KV_TABLE_NAME)};
  return static_cast<size_t>(k) < sizeof names / sizeof *names ? names[static_cast<size_t>(k)] : "?";
}

const char* batch_error_name(BatchError e) {
  static const char* names[] = {KV_BATCH_ERRORS(KV_TABLE_NAME)};
  return names[static_cast<size_t>(e)];
}

bool take_tokens(mp::Reader& ev, RawFields& f) {
  const mp::Reader start = ev;
  mp::Reader probe = ev;
  uint32_t n;
  if (probe.peek() == mp::Type::Array && probe.read_array(n) && (n == 0 || probe.peek() != mp::Type::Array)) {
    uint32_t bad = 0;
    bool ok = probe.skip_uint32s(n, bad);
    if (!ok) {
      if (!probe.ok()) {
        ev = probe;
        return false;
      }
      for (uint32_t i = bad; i < n; ++i)
        if (!probe.skip()) {
          ev = probe;
          return false;
        }
    }
    f.tokens = mp::Reader(start.pos(), static_cast<size_t>(probe.pos() - start.pos()));
    f.tokens_checked = true;
    f.token_count = n;
    f.token_bad = ok ? -1 : static_cast<int64_t>(bad);
    ev = probe;
    return true;
  }
  return ev.take(f.tokens);
}

const EventAdapter* const* all_adapters() {
  static const EventAdapter* const list[] = {&tagged_map_adapter(), &sglang_positional_adapter(),
                                             &vllm_positional_adapter(), nullptr};
  return list;
}

void Batch::clear() {
  ts = 0;
  has_dp = false;
  dp = 0;
  map_form = false;
  events.clear();
  hashes.clear();
  tokens.clear();
  bad.clear();
  error = BatchError::None;
  error_text.clear();
}

bool tier_of_medium(std::string_view m, uint8_t& tier) {
  if (m.empty()) {
    tier = kGpu;
    return true;
  }
  // Names compare case-blind: ASCII upper case by arithmetic (libc's toupper is a call per byte,
  // and locale-dependent).
  char u[16];
  if (m.size() >= sizeof u) return false;
  for (size_t i = 0; i < m.size(); ++i) {
    const char ch = m[i];
    u[i] = ch >= 'a' && ch <= 'z' ? static_cast<char>(ch - 'a' + 'A') : ch;
  }
  const std::string_view s(u, m.size());
  if (s == "GPU" || s == "DEVICE") tier = kGpu;
  else if (s == "CPU" || s == "CPU_PINNED" || s == "CPU_TIER1") tier = kCpuPinned;
  else if (s == "CPU_TIER2" || s == "DISK" || s == "NVME" || s == "STORAGE") tier = kDisk;
  else if (s == "EXTERNAL" || s == "NETWORK" || s == "REMOTE" || s == "SHARED") tier = kExternal;
  else return false;
  return true;
}

namespace {

bool absent(const mp::Reader& r) {
  return r.remaining() == 0 || r.peek() == mp::Type::Nil;
}

const char* tname(const mp::Reader& r) {
  return r.remaining() == 0 ? "missing" : mp::type_name(r.peek());
}

struct Fail {
  EventError e;
};

void opt_str(mp::Reader r, const char* field, OptStr& out) {
  if (absent(r)) return;
  if (!r.read_str(out.value)) throw Fail{{BadKind::Fields, std::string(field) + " is " + tname(r) + ", not a string"}};
  out.present = true;
}

// Validates `f` completely, then appends one event (and its hashes, and tokens when asked).
void append(const RawFields& f, bool want_tokens, Batch& b) {
  Event e;
  e.kind = f.kind;
  if (f.kind == kCleared) {
    e.hash_begin = e.hash_end = static_cast<uint32_t>(b.hashes.size());
    e.tok_begin = e.tok_end = static_cast<uint32_t>(b.tokens.size());
    b.events.push_back(e);
    return;
  }
  // block_hashes, read straight into the batch (the caller trims them off if anything throws;
  // nh is bounded by the payload's size).
  mp::Reader h = f.hashes;
  uint32_t nh;
  if (h.peek() != mp::Type::Array || !h.read_array(nh))
    throw Fail{{BadKind::Hash, std::string("block_hashes is ") + tname(f.hashes) + ", not an array"}};
  e.hash_begin = static_cast<uint32_t>(b.hashes.size());
  b.hashes.resize(e.hash_begin + size_t(nh));
  int64_t* hv = b.hashes.data() + e.hash_begin;
  for (uint32_t i = 0; i < nh; ++i)
    if (!h.read_hash(hv[i]))
      throw Fail{{BadKind::Hash, std::string("non-integer hash (") + tname(h) + ") in block_hashes"}};
  opt_str(f.medium, "medium", e.medium);
  if (!tier_of_medium(e.medium.value, e.tier))
    throw Fail{{BadKind::Medium, "unknown medium '" + std::string(e.medium.value.substr(0, 40)) + "'"}};
  mp::Reader toks_at;
  uint32_t nt = 0;
  if (f.kind == kStored) {
    if (!absent(f.parent)) {
      mp::Reader p = f.parent;
      if (!p.read_hash(e.parent))
        throw Fail{{BadKind::Hash, std::string("non-integer hash (") + tname(f.parent) + ") in parent_block_hash"}};
      e.has_parent = true;
    }
    mp::Reader t = f.tokens;
    if (t.peek() != mp::Type::Array || !t.read_array(nt)) throw Fail{{BadKind::Tokens, "token_ids is not an array"}};
    toks_at = t;
    e.bigram = nt > 0 && t.peek() == mp::Type::Array;
    if (f.tokens_checked) {
      if (f.token_bad >= 0)
        throw Fail{{BadKind::Tokens, "token_ids[" + std::to_string(f.token_bad) + "] is not a uint32"}};
    } else if (e.bigram) {
      for (uint32_t i = 0; i < nt; ++i) {
        uint32_t m, a, c;
        if (!t.read_array(m) || m != 2 || !t.read_uint32(a) || !t.read_uint32(c))
          throw Fail{{BadKind::Tokens, "bad bigram token pair"}};
      }
    } else {
      uint32_t bad = 0;
      if (!t.skip_uint32s(nt, bad))
        throw Fail{{BadKind::Tokens, "token_ids[" + std::to_string(bad) + "] is not a uint32"}};
    }
    int64_t bs = 0;
    mp::Reader r = f.block_size;
    if (absent(r) || !r.read_int(bs) || bs <= 0 || bs > INT32_MAX)
      throw Fail{{BadKind::BlockSize, "block_size is not a positive int"}};
    e.block_size = static_cast<int32_t>(bs);
    if (!absent(f.lora_id)) {
      mp::Reader l = f.lora_id;
      if (!l.read_int(e.lora_id))
        throw Fail{{BadKind::Fields, std::string("lora_id is ") + tname(f.lora_id) + ", not an int"}};
      e.has_lora_id = true;
    }
    opt_str(f.cache_salt, "cache_salt", e.cache_salt);
    opt_str(f.session_id, "session_id", e.session_id);
    opt_str(f.lora_name, "lora_name", e.lora_name);
    e.units = nt;
  }
  // Everything is valid: append.
  e.hash_end = static_cast<uint32_t>(b.hashes.size());
  e.tok_begin = static_cast<uint32_t>(b.tokens.size());
  if (want_tokens && nt && !e.bigram) {
    mp::Reader t = toks_at;
    const size_t at = b.tokens.size();
    b.tokens.resize(at + nt);
    t.read_checked_uint32s(nt, b.tokens.data() + at);
  } else if (want_tokens && nt) {
    mp::Reader t = toks_at;
    for (uint32_t i = 0; i < nt; ++i) {
      uint32_t v;
      {
        uint32_t m;
        t.read_array(m);
        t.read_uint32(v);
        b.tokens.push_back(v);
        t.read_uint32(v);
        b.tokens.push_back(v);
      }
    }
  }
  e.tok_end = static_cast<uint32_t>(b.tokens.size());
  b.events.push_back(e);
}

// Decodes the event `r` is positioned at and steps over it. False only when the payload itself
// is broken there (truncated, too deep): the whole batch is then refused.
bool decode_event(mp::Reader& r, uint32_t index, bool want_tokens, int max_depth, bool fast_path, Batch& b) {
  const mp::Reader start = r;
  const mp::Type t = r.peek();
  auto skip_bad = [&](BadKind kind, std::string reason) {
    r = start;
    if (!r.skip(max_depth)) return false;
    b.bad.push_back({index, kind, std::move(reason)});
    return true;
  };
  if (t != mp::Type::Array && t != mp::Type::Map)
    return skip_bad(BadKind::NotAnEvent, std::string("event is ") + mp::type_name(t));
  if (fast_path && t == mp::Type::Map && decode_sglang_stored(r, want_tokens, b)) return true;
  for (const EventAdapter* const* a = all_adapters(); *a; ++a) {
    if (!(*a)->claims(r)) continue;
    RawFields f;
    EventError err{BadKind::Fields, ""};
    if (!(*a)->fields(r, f, err) || !r.ok()) {
      if (!r.ok()) r = start;
      return skip_bad(err.kind, err.reason.empty() ? "event is malformed" : std::move(err.reason));
    }
    const size_t nh = b.hashes.size(), nt = b.tokens.size();
    try {
      append(f, want_tokens, b);
    } catch (const Fail& x) {
      b.hashes.resize(nh);
      b.tokens.resize(nt);
      b.bad.push_back({index, x.e.kind, x.e.reason});
    }
    return true;
  }
  return skip_bad(BadKind::NotAnEvent, "no adapter reads this event");
}

bool batch_fail(Batch& b, BatchError e, std::string text) {
  b.events.clear();
  b.hashes.clear();
  b.tokens.clear();
  b.bad.clear();
  b.error = e;
  b.error_text = std::move(text);
  return false;
}

}  // namespace

namespace {

// The events array `r` is positioned at, event by event (no pre-walk: a payload broken anywhere
// fails the batch, and nothing is applied until the whole batch has decoded).
bool decode_events(mp::Reader& r, const Limits& limits, bool want_tokens, Batch& b, const HashSink* sink) {
  uint32_t n;
  if (r.peek() != mp::Type::Array)
    return batch_fail(b, BatchError::Shape, std::string("batch events is ") + mp::type_name(r.peek()));
  if (!r.read_array(n)) return batch_fail(b, BatchError::Msgpack, mp::failure_text(r.failure()));
  if (n > limits.max_events)
    return batch_fail(b, BatchError::TooManyEvents,
                      "batch: " + std::to_string(n) + " events, over the maximum " + std::to_string(limits.max_events));
  b.events.reserve(std::min<uint32_t>(n, 4096));
  for (uint32_t i = 0; i < n; ++i) {
    const size_t from = b.hashes.size();
    if (!decode_event(r, i, want_tokens, limits.max_depth, limits.fast_path, b))
      return batch_fail(b, BatchError::Msgpack, mp::failure_text(r.failure()));
    if (sink && b.hashes.size() > from) sink->seen(sink->ctx, b.hashes.data() + from, b.hashes.size() - from);
  }
  return true;
}

}  // namespace

bool decode_batch(const uint8_t* data, size_t size, const Limits& limits, bool want_tokens, Batch& b,
                  const HashSink* sink) {
  b.clear();
  if (size > limits.max_bytes)
    return batch_fail(
        b, BatchError::TooLarge,
        "batch: " + std::to_string(size) + " bytes, over the maximum " + std::to_string(limits.max_bytes));
  if (size == 0) return batch_fail(b, BatchError::Msgpack, "msgpack: empty payload");
  mp::Reader r(data, size);
  mp::Reader ts, dp;
  bool have_events = false;
  auto broken = [&]() { return batch_fail(b, BatchError::Msgpack, mp::failure_text(r.failure())); };
  const mp::Type top = r.peek();
  if (top == mp::Type::Array) {
    uint32_t n;
    if (!r.read_array(n)) return broken();
    if (n < 2 || n > 3)
      return batch_fail(b, BatchError::Shape, "batch array has " + std::to_string(n) + " elements, expected 2 or 3");
    if (!r.take(ts)) return broken();
    if (!decode_events(r, limits, want_tokens, b, sink)) return false;
    have_events = true;
    if (n > 2 && !r.take(dp)) return broken();
  } else if (top == mp::Type::Map) {
    b.map_form = true;
    uint32_t n;
    if (!r.read_map(n)) return broken();
    mp::Reader dps[3];
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view k;
      const bool is_str = r.read_str(k);
      if (!is_str && !r.skip()) return broken();
      if (is_str && k == "events") {
        if (have_events) return batch_fail(b, BatchError::Shape, "batch has two events keys");
        if (!decode_events(r, limits, want_tokens, b, sink)) return false;
        have_events = true;
        continue;
      }
      mp::Reader v;
      if (!r.take(v, limits.max_depth)) return broken();
      if (!is_str) continue;
      if (k == "ts") ts = v;
      else if (k == "attn_dp_rank") dps[0] = v;
      else if (k == "data_parallel_rank") dps[1] = v;
      else if (k == "dp_rank") dps[2] = v;
    }
    for (auto& d : dps)
      if (!absent(d)) {
        dp = d;
        break;
      }
    if (!have_events) return batch_fail(b, BatchError::Shape, "batch events is missing");
  } else {
    return batch_fail(b, BatchError::Shape, std::string("batch is ") + (r.remaining() ? mp::type_name(top) : "empty"));
  }
  if (!r.at_end()) {
    if (!r.ok()) return broken();
    return batch_fail(b, BatchError::Msgpack, "msgpack: " + std::to_string(r.remaining()) + " trailing bytes");
  }
  if (!ts.read_number(b.ts)) return batch_fail(b, BatchError::Shape, std::string("batch ts is ") + tname(ts));
  if (!absent(dp)) {
    if (!dp.read_int(b.dp)) return batch_fail(b, BatchError::Shape, std::string("batch dp_rank is ") + tname(dp));
    b.has_dp = true;
  }
  return true;
}

}  // namespace kv::events

// Native KV-event batch decoder: one call decodes a whole msgpack payload (SGLang 0.5.23's
// [ts, [tagged-map events], attn_dp_rank], SGLang's older positional events with a metadata map,
// vLLM's positional and map forms) into flat columns, so JavaScript never materialises the
// token ids as JS values. Parsing is msgpack-c's (libmsgpack-cxx-dev, header-only, Debian 4.1.3);
// this file only walks the object tree and validates it with the same rules as
// src/events/decode.ts. Validation of each event is complete before its columns are appended,
// so a bad event is reported (index + reason) and contributes nothing.
#define MSGPACK_NO_BOOST 1
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <msgpack.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using msgpack::object;
namespace mt = msgpack::type;

struct EventError {
  std::string reason;
};

enum Kind : uint8_t { kStored = 0, kRemoved = 1, kCleared = 2 };

struct Extras {
  std::optional<std::string> medium, cacheSalt, sessionId, loraName;
  std::optional<int64_t> loraId;
  bool any() const { return medium || cacheSalt || sessionId || loraName || loraId; }
};

struct Columns {
  std::vector<uint8_t> kinds, tiers, hasParent, bigram;
  std::vector<int32_t> blockSizes;
  std::vector<uint32_t> hashOffsets{0}, tokenOffsets{0};
  std::vector<int64_t> hashes, parents;
  std::vector<uint32_t> tokens;
  std::vector<std::pair<uint32_t, Extras>> extras;
  std::vector<std::pair<uint32_t, std::string>> bad;
};

std::string_view sv(const object& o) {
  return {o.via.str.ptr, o.via.str.size};
}

const char* typeName(const object& o) {
  switch (o.type) {
    case mt::NIL:
      return "nil";
    case mt::BOOLEAN:
      return "bool";
    case mt::POSITIVE_INTEGER:
    case mt::NEGATIVE_INTEGER:
      return "int";
    case mt::FLOAT32:
    case mt::FLOAT64:
      return "float";
    case mt::STR:
      return "str";
    case mt::BIN:
      return "bytes";
    case mt::ARRAY:
      return "array";
    case mt::MAP:
      return "map";
    default:
      return "ext";
  }
}

int64_t hashOf(const object& o, const char* field) {
  if (o.type == mt::POSITIVE_INTEGER) return static_cast<int64_t>(o.via.u64);  // uint64 -> signed
  if (o.type == mt::NEGATIVE_INTEGER) return o.via.i64;
  throw EventError{std::string("non-integer hash (") + typeName(o) + ") in " + field};
}

bool isNil(const object* o) {
  return o == nullptr || o->type == mt::NIL;
}

std::optional<std::string> optStr(const object* o, const char* field) {
  if (isNil(o)) return std::nullopt;
  if (o->type != mt::STR) throw EventError{std::string(field) + " is " + typeName(*o) + ", not a string"};
  return std::string(sv(*o));
}

std::optional<int64_t> optInt(const object* o, const char* field) {
  if (isNil(o)) return std::nullopt;
  if (o->type == mt::POSITIVE_INTEGER) return static_cast<int64_t>(o->via.u64);
  if (o->type == mt::NEGATIVE_INTEGER) return o->via.i64;
  throw EventError{std::string(field) + " is " + typeName(*o) + ", not an int"};
}

// Dynamo's StorageTier::from_kv_medium (absent/empty -> GPU). Unknown -> error.
uint8_t tierOf(const std::optional<std::string>& m) {
  if (!m || m->empty()) return 0;
  std::string u = *m;
  for (auto& c : u) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  if (u == "GPU" || u == "DEVICE") return 0;
  if (u == "CPU" || u == "CPU_PINNED" || u == "CPU_TIER1") return 1;
  if (u == "CPU_TIER2" || u == "DISK" || u == "NVME" || u == "STORAGE") return 2;
  if (u == "EXTERNAL" || u == "NETWORK" || u == "REMOTE" || u == "SHARED") return 3;
  throw EventError{"unknown medium '" + *m + "'"};
}

struct Fields {
  const object* hashes = nullptr;
  const object* parent = nullptr;
  const object* tokens = nullptr;
  const object* blockSize = nullptr;
  const object* loraId = nullptr;
  const object* medium = nullptr;
  const object* cacheSalt = nullptr;
  const object* sessionId = nullptr;
  const object* loraName = nullptr;
};

const object* mapGet(const object& m, std::string_view key) {
  for (uint32_t i = 0; i < m.via.map.size; i++) {
    const auto& kv = m.via.map.ptr[i];
    if (kv.key.type == mt::STR && sv(kv.key) == key) return &kv.val;
  }
  return nullptr;
}

void checkHashes(const object* h) {
  if (h == nullptr || h->type != mt::ARRAY)
    throw EventError{std::string("block_hashes is ") + (h ? typeName(*h) : "missing") + ", not an array"};
  for (uint32_t i = 0; i < h->via.array.size; i++) hashOf(h->via.array.ptr[i], "block_hashes");
}

void appendHashes(Columns& c, const object& h) {
  for (uint32_t i = 0; i < h.via.array.size; i++) c.hashes.push_back(hashOf(h.via.array.ptr[i], "block_hashes"));
  c.hashOffsets.push_back(static_cast<uint32_t>(c.hashes.size()));
}

bool isU32(const object& t) {
  return t.type == mt::POSITIVE_INTEGER && t.via.u64 <= 0xffffffffULL;
}

void stored(Columns& c, const Fields& f, bool wantTokens) {
  // --- validate everything first ---
  checkHashes(f.hashes);
  std::optional<int64_t> parent;
  if (!isNil(f.parent)) parent = hashOf(*f.parent, "parent_block_hash");
  if (f.tokens == nullptr || f.tokens->type != mt::ARRAY) throw EventError{"token_ids is not an array"};
  const auto& toks = f.tokens->via.array;
  bool bigram = toks.size > 0 && toks.ptr[0].type == mt::ARRAY;
  for (uint32_t i = 0; i < toks.size; i++) {
    const object& t = toks.ptr[i];
    if (bigram) {
      if (t.type != mt::ARRAY || t.via.array.size != 2 || !isU32(t.via.array.ptr[0]) || !isU32(t.via.array.ptr[1]))
        throw EventError{"bad bigram token pair"};
    } else if (!isU32(t)) {
      throw EventError{"token_ids[" + std::to_string(i) + "] is not a uint32"};
    }
  }
  auto bs = optInt(f.blockSize, "block_size");
  if (!bs || *bs <= 0 || *bs > INT32_MAX) throw EventError{"block_size is not a positive int"};
  Extras x;
  x.loraId = optInt(f.loraId, "lora_id");
  x.medium = optStr(f.medium, "medium");
  x.cacheSalt = optStr(f.cacheSalt, "cache_salt");
  x.sessionId = optStr(f.sessionId, "session_id");
  x.loraName = optStr(f.loraName, "lora_name");
  uint8_t tier = tierOf(x.medium);
  // --- then append ---
  c.kinds.push_back(kStored);
  c.tiers.push_back(tier);
  c.blockSizes.push_back(static_cast<int32_t>(*bs));
  c.hasParent.push_back(parent ? 1 : 0);
  c.parents.push_back(parent.value_or(0));
  c.bigram.push_back(bigram ? 1 : 0);
  appendHashes(c, *f.hashes);
  if (wantTokens) {
    for (uint32_t i = 0; i < toks.size; i++) {
      const object& t = toks.ptr[i];
      if (bigram) {
        c.tokens.push_back(static_cast<uint32_t>(t.via.array.ptr[0].via.u64));
        c.tokens.push_back(static_cast<uint32_t>(t.via.array.ptr[1].via.u64));
      } else {
        c.tokens.push_back(static_cast<uint32_t>(t.via.u64));
      }
    }
  }
  c.tokenOffsets.push_back(static_cast<uint32_t>(c.tokens.size()));
  if (x.any()) c.extras.emplace_back(static_cast<uint32_t>(c.kinds.size() - 1), std::move(x));  // decoded position
}

void removed(Columns& c, const object* hashes, const object* mediumO) {
  checkHashes(hashes);
  Extras x;
  x.medium = optStr(mediumO, "medium");
  uint8_t tier = tierOf(x.medium);
  c.kinds.push_back(kRemoved);
  c.tiers.push_back(tier);
  c.blockSizes.push_back(0);
  c.hasParent.push_back(0);
  c.parents.push_back(0);
  c.bigram.push_back(0);
  appendHashes(c, *hashes);
  c.tokenOffsets.push_back(static_cast<uint32_t>(c.tokens.size()));
  if (x.any()) c.extras.emplace_back(static_cast<uint32_t>(c.kinds.size() - 1), std::move(x));  // decoded position
}

void cleared(Columns& c) {
  c.kinds.push_back(kCleared);
  c.tiers.push_back(0);
  c.blockSizes.push_back(0);
  c.hasParent.push_back(0);
  c.parents.push_back(0);
  c.bigram.push_back(0);
  c.hashOffsets.push_back(static_cast<uint32_t>(c.hashes.size()));
  c.tokenOffsets.push_back(static_cast<uint32_t>(c.tokens.size()));
}

void event(Columns& c, const object& e, bool wantTokens) {
  if (e.type == mt::ARRAY) {
    const auto& a = e.via.array;
    if (a.size == 0 || a.ptr[0].type != mt::STR) throw EventError{"event array without a tag"};
    auto tag = sv(a.ptr[0]);
    auto at = [&](uint32_t i) -> const object* { return i < a.size ? &a.ptr[i] : nullptr; };
    if (tag == "BlockStored") {
      if (a.size < 5) throw EventError{"BlockStored has " + std::to_string(a.size) + " fields, needs >= 5"};
      Fields f{at(1), at(2), at(3), at(4), at(5), at(6)};
      const object* x = at(7);
      if (x && x->type == mt::MAP) {  // SGLang metadata {cache_salt, session_id}
        f.cacheSalt = mapGet(*x, "cache_salt");
        f.sessionId = mapGet(*x, "session_id");
        f.loraName = mapGet(*x, "lora_name");
      } else {
        f.loraName = x;  // vLLM lora_name
      }
      stored(c, f, wantTokens);
    } else if (tag == "BlockRemoved") {
      if (a.size < 2) throw EventError{"BlockRemoved without block_hashes"};
      removed(c, at(1), at(2));
    } else if (tag == "AllBlocksCleared") {
      cleared(c);
    } else {
      throw EventError{"unknown event tag '" + std::string(tag) + "'"};
    }
    return;
  }
  if (e.type == mt::MAP) {
    const object* type = mapGet(e, "type");
    if (type == nullptr || type->type != mt::STR) throw EventError{"unknown event tag (no type)"};
    auto tag = sv(*type);
    if (tag == "BlockStored") {
      // One pass over the keys (SGLang's map events carry 6-9 of them).
      Fields f;
      const object* meta = nullptr;
      for (uint32_t i = 0; i < e.via.map.size; i++) {
        const auto& kv = e.via.map.ptr[i];
        if (kv.key.type != mt::STR) continue;
        auto k = sv(kv.key);
        switch (k.size()) {
          case 7:
            if (k == "lora_id") f.loraId = &kv.val;
            break;
          case 6:
            if (k == "medium") f.medium = &kv.val;
            break;
          case 8:
            if (k == "metadata") meta = &kv.val;
            break;
          case 9:
            if (k == "token_ids") f.tokens = &kv.val;
            else if (k == "lora_name") f.loraName = &kv.val;
            break;
          case 10:
            if (k == "block_size") f.blockSize = &kv.val;
            else if (k == "cache_salt") f.cacheSalt = &kv.val;
            else if (k == "session_id") f.sessionId = &kv.val;
            break;
          case 12:
            if (k == "block_hashes") f.hashes = &kv.val;
            break;
          case 9 + 8:
            if (k == "parent_block_hash") f.parent = &kv.val;
            break;
          default:
            break;
        }
      }
      if (meta && meta->type == mt::MAP) {
        if (isNil(f.cacheSalt)) f.cacheSalt = mapGet(*meta, "cache_salt");
        if (isNil(f.sessionId)) f.sessionId = mapGet(*meta, "session_id");
      }
      stored(c, f, wantTokens);
    } else if (tag == "BlockRemoved") {
      removed(c, mapGet(e, "block_hashes"), mapGet(e, "medium"));
    } else if (tag == "AllBlocksCleared") {
      cleared(c);
    } else {
      throw EventError{"unknown event tag '" + std::string(tag) + "'"};
    }
    return;
  }
  throw EventError{std::string("event is ") + typeName(e)};
}

Napi::Value optStrValue(Napi::Env env, const std::optional<std::string>& s) {
  return s ? Napi::String::New(env, *s) : env.Null();
}

size_t align8(size_t n) {
  return (n + 7) & ~size_t(7);
}

// decodeKvEventBatchInto(payload: Uint8Array, out: Uint8Array, wantTokens: boolean)
//   -> bytes written (>= 0) | -(bytes needed) when `out` is too small
//      | { bytes, extras, bad } when some event was bad or carried optional strings
//      | { error } when the batch itself cannot be decoded.
// `out` (8-byte aligned, reused by the caller across calls) receives the columns:
//   f64[8] header [ts, dpRank (NaN = null), form (0 array, 1 map), count, nHashes, nTokens, 0, 0],
//   then, each section 8-byte aligned: kinds u8[count], tiers u8[count], hasParent u8[count],
//   flags u8[count] (bit0 bigram, bit1 medium present), blockSizes i32[count],
//   hashOffsets u32[count+1], tokenOffsets u32[count+1], parents i64[count], hashes i64[nHashes],
//   tokens u32[nTokens].
// One addon call and no allocation on the JavaScript heap per batch.
Napi::Value DecodeKvEventBatchInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto isU8 = [](const Napi::Value& v) {
    return v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_uint8_array;
  };
  if (info.Length() < 2 || !isU8(info[0]) || !isU8(info[1])) {
    throw Napi::TypeError::New(env, "decodeKvEventBatchInto: payload and out must be Uint8Arrays");
  }
  auto payload = info[0].As<Napi::Uint8Array>();
  auto outArr = info[1].As<Napi::Uint8Array>();
  bool wantTokens = info.Length() > 2 && info[2].ToBoolean().Value();
  auto fail = [&](const std::string& why) {
    auto r = Napi::Object::New(env);
    r.Set("error", why);
    return r;
  };
  thread_local msgpack::zone zone;
  zone.clear();
  object root;
  try {
    size_t off = 0;
    root = msgpack::unpack(zone, reinterpret_cast<const char*>(payload.Data()), payload.ByteLength(), off);
  } catch (const msgpack::insufficient_bytes&) {
    return fail("msgpack: truncated payload");
  } catch (const std::exception& e) {
    return fail(std::string("msgpack: ") + e.what());
  }
  const object* ts = nullptr;
  const object* events = nullptr;
  const object* dp = nullptr;
  double form = 0;
  if (root.type == mt::ARRAY) {
    if (root.via.array.size < 2 || root.via.array.size > 3)
      return fail("batch array has " + std::to_string(root.via.array.size) + " elements, expected 2 or 3");
    ts = &root.via.array.ptr[0];
    events = &root.via.array.ptr[1];
    dp = root.via.array.size > 2 ? &root.via.array.ptr[2] : nullptr;
  } else if (root.type == mt::MAP) {
    form = 1;
    ts = mapGet(root, "ts");
    events = mapGet(root, "events");
    dp = mapGet(root, "attn_dp_rank");
    if (isNil(dp)) dp = mapGet(root, "data_parallel_rank");
    if (isNil(dp)) dp = mapGet(root, "dp_rank");
  } else {
    return fail(std::string("batch is ") + typeName(root));
  }
  double tsv;
  if (ts && (ts->type == mt::FLOAT64 || ts->type == mt::FLOAT32)) tsv = ts->via.f64;
  else if (ts && ts->type == mt::POSITIVE_INTEGER) tsv = static_cast<double>(ts->via.u64);
  else if (ts && ts->type == mt::NEGATIVE_INTEGER) tsv = static_cast<double>(ts->via.i64);
  else return fail(std::string("batch ts is ") + (ts ? typeName(*ts) : "missing"));
  if (events == nullptr || events->type != mt::ARRAY)
    return fail(std::string("batch events is ") + (events ? typeName(*events) : "missing"));
  double dpv = std::nan("");
  if (!isNil(dp)) {
    if (dp->type == mt::POSITIVE_INTEGER) dpv = static_cast<double>(dp->via.u64);
    else if (dp->type == mt::NEGATIVE_INTEGER) dpv = static_cast<double>(dp->via.i64);
    else return fail(std::string("batch dp_rank is ") + typeName(*dp));
  }

  thread_local Columns c;
  c.kinds.clear();
  c.tiers.clear();
  c.hasParent.clear();
  c.bigram.clear();
  c.blockSizes.clear();
  c.hashOffsets.assign(1, 0);
  c.tokenOffsets.assign(1, 0);
  c.hashes.clear();
  c.parents.clear();
  c.tokens.clear();
  c.extras.clear();
  c.bad.clear();
  const auto& evs = events->via.array;
  for (uint32_t i = 0; i < evs.size; i++) {
    try {
      event(c, evs.ptr[i], wantTokens);
    } catch (const EventError& e) {
      c.bad.emplace_back(i, e.reason);
    }
  }
  const size_t n = c.kinds.size();
  size_t need = 64;
  const size_t oKinds = need;
  need += align8(n);
  const size_t oTiers = need;
  need += align8(n);
  const size_t oHasParent = need;
  need += align8(n);
  const size_t oFlags = need;
  need += align8(n);
  const size_t oBlockSizes = need;
  need += align8(n * 4);
  const size_t oHashOffsets = need;
  need += align8((n + 1) * 4);
  const size_t oTokenOffsets = need;
  need += align8((n + 1) * 4);
  const size_t oParents = need;
  need += n * 8;
  const size_t oHashes = need;
  need += c.hashes.size() * 8;
  const size_t oTokens = need;
  need += align8(c.tokens.size() * 4);
  if (need > outArr.ByteLength()) return Napi::Number::New(env, -static_cast<double>(need));
  uint8_t* out = outArr.Data();
  double header[8] = {tsv,
                      dpv,
                      form,
                      static_cast<double>(n),
                      static_cast<double>(c.hashes.size()),
                      static_cast<double>(c.tokens.size()),
                      0,
                      0};
  std::memcpy(out, header, sizeof header);
  auto put = [&](size_t off, const void* src, size_t bytes) {
    if (bytes) std::memcpy(out + off, src, bytes);
  };
  put(oKinds, c.kinds.data(), n);
  put(oTiers, c.tiers.data(), n);
  put(oHasParent, c.hasParent.data(), n);
  // flags: bit0 bigram; bit1 medium present (set below from extras)
  std::vector<uint8_t>& flags = c.bigram;
  for (const auto& [idx, x] : c.extras)
    if (x.medium) flags[idx] |= 2;
  put(oFlags, flags.data(), n);
  put(oBlockSizes, c.blockSizes.data(), n * 4);
  put(oHashOffsets, c.hashOffsets.data(), (n + 1) * 4);
  put(oTokenOffsets, c.tokenOffsets.data(), (n + 1) * 4);
  put(oParents, c.parents.data(), n * 8);
  put(oHashes, c.hashes.data(), c.hashes.size() * 8);
  put(oTokens, c.tokens.data(), c.tokens.size() * 4);

  // Optional strings other than a canonical medium, and bad events: the slow (rare) path.
  bool anyExtras = false;
  for (const auto& [idx, x] : c.extras) {
    static const char* canon[] = {"GPU", "CPU_PINNED", "DISK", "EXTERNAL"};
    bool mediumCanon = !x.medium || *x.medium == canon[c.tiers[idx]];
    if (x.cacheSalt || x.sessionId || x.loraName || x.loraId || !mediumCanon) anyExtras = true;
  }
  if (!anyExtras && c.bad.empty()) return Napi::Number::New(env, static_cast<double>(need));
  auto r = Napi::Object::New(env);
  r.Set("bytes", static_cast<double>(need));
  auto extras = Napi::Array::New(env, c.extras.size());
  for (size_t i = 0; i < c.extras.size(); i++) {
    const auto& [idx, x] = c.extras[i];
    auto o = Napi::Object::New(env);
    o.Set("index", static_cast<double>(idx));
    o.Set("medium", optStrValue(env, x.medium));
    o.Set("cacheSalt", optStrValue(env, x.cacheSalt));
    o.Set("sessionId", optStrValue(env, x.sessionId));
    o.Set("loraName", optStrValue(env, x.loraName));
    o.Set("loraId", x.loraId ? Napi::Number::New(env, static_cast<double>(*x.loraId)) : env.Null());
    extras[i] = o;
  }
  r.Set("extras", extras);
  auto bad = Napi::Array::New(env, c.bad.size());
  for (size_t i = 0; i < c.bad.size(); i++) {
    auto o = Napi::Object::New(env);
    o.Set("index", static_cast<double>(c.bad[i].first));
    o.Set("reason", c.bad[i].second);
    bad[i] = o;
  }
  r.Set("bad", bad);
  return r;
}

}  // namespace

void RegisterEvents(Napi::Env env, Napi::Object exports) {
  exports.Set("decodeKvEventBatchInto", Napi::Function::New(env, DecodeKvEventBatchInto, "decodeKvEventBatchInto"));
}

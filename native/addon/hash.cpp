// JS bindings of the hash core (native/core). Batch in, typed arrays out; no per-page JS calls.
#include <cstring>

#include "args.h"
#include "chain_args.h"
#include "dynamo.h"
#include "mooncake.h"
#include "register.h"
#include "sglang_chain.h"
#include "sglang_namespace.h"
#include "sha256.h"

using namespace kvglue;

namespace {

// sha256(data: Uint8Array): Buffer
Napi::Value Sha256Fn(const Napi::CallbackInfo& info) {
  RequireArgs(info, 1, "sha256");
  auto data = BytesArg(info, 0, "data");
  auto out = Napi::Buffer<uint8_t>::New(info.Env(), 32);
  kv::sha256(data.data, data.length, out.Data());
  return out;
}

Napi::Value Sha256BackendFn(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), kv::sha256_backend_name(kv::sha256_backend()));
}

// setSha256Backend("portable" | "sha-ni"): boolean (false when the CPU lacks SHA-NI)
Napi::Value SetSha256BackendFn(const Napi::CallbackInfo& info) {
  RequireArgs(info, 1, "setSha256Backend");
  auto name = OptionalStringArg(info, 0, "backend");
  if (!name || (*name != "portable" && *name != "sha-ni")) {
    ThrowRange(info.Env(), "backend must be \"portable\" or \"sha-ni\"");
  }
  return Napi::Boolean::New(
      info.Env(), kv::sha256_set_backend(*name == "sha-ni" ? kv::Sha256Backend::ShaNi : kv::Sha256Backend::Portable));
}

// sglangChain(tokens: Uint32Array, offsets: Uint32Array|null, pageSize, bigram, prior: 32 B|null)
//   -> { pageOffsets: Uint32Array (nseq + 1), digests: Buffer (32 B a page) }
Napi::Value SglangChainFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const ChainArgs a(info, "sglangChain");
  auto digests = Napi::Buffer<uint8_t>::New(env, a.pages * 32);
  kv::sglang_chain_batch(a.batch, a.page_offsets.data(), digests.Data());
  auto result = Napi::Object::New(env);
  result.Set("pageOffsets", ToUint32Array(env, a.page_offsets));
  result.Set("digests", digests);
  return result;
}

// digestsToInt64(digests: Uint8Array (32 B each), namespaceSeed: 32 B | null): BigInt64Array
Napi::Value DigestsToInt64Fn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireArgs(info, 1, "digestsToInt64");
  auto d = BytesArg(info, 0, "digests");
  if (d.length % 32) ThrowRange(env, "digests length must be a multiple of 32");
  auto seed_view = OptionalBytesArg(info, 1, "namespaceSeed", 32);
  std::optional<kv::Digest> seed;
  if (seed_view) {
    seed.emplace();
    std::memcpy(seed->data(), seed_view->data, 32);
  }
  const size_t n = d.length / 32;
  auto out = Napi::BigInt64Array::New(env, n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t h = kv::digest_to_int64(d.data + 32 * i);
    out[i] = seed ? kv::namespaced_block_hash(h, *seed) : h;
  }
  return out;
}

// namespacedBlockHashes(hashes: BigInt64Array, seed: 32 B): BigInt64Array
Napi::Value NamespacedBlockHashesFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireArgs(info, 2, "namespacedBlockHashes");
  auto h = TypedArg<const int64_t>(info, 0, "hashes", napi_bigint64_array, "BigInt64Array");
  auto seed_view = OptionalBytesArg(info, 1, "seed", 32);
  if (!seed_view) ThrowType(env, "seed must be a 32-byte Uint8Array");
  kv::Digest seed;
  std::memcpy(seed.data(), seed_view->data, 32);
  auto out = Napi::BigInt64Array::New(env, h.length);
  for (size_t i = 0; i < h.length; ++i) out[i] = kv::namespaced_block_hash(h.data[i], seed);
  return out;
}

// digestsToHex(digests: Uint8Array (32 B each)): string[]
Napi::Value DigestsToHexFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireArgs(info, 1, "digestsToHex");
  auto d = BytesArg(info, 0, "digests");
  if (d.length % 32) ThrowRange(env, "digests length must be a multiple of 32");
  const size_t n = d.length / 32;
  auto out = Napi::Array::New(env, n);
  char hex[64];
  for (size_t i = 0; i < n; ++i) {
    kv::digest_to_hex(d.data + 32 * i, hex);
    out.Set(uint32_t(i), Napi::String::New(env, hex, 64));
  }
  return out;
}

Napi::Value DigestOrNull(Napi::Env env, const std::optional<kv::Digest>& d) {
  if (!d) return env.Null();
  return Napi::Buffer<uint8_t>::Copy(env, d->data(), 32);
}

// namespaceSeed(kind: "storage" | "event", extraKey: string|null, cacheSalt: string|null): Buffer|null
Napi::Value NamespaceSeedFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireArgs(info, 1, "namespaceSeed");
  auto kind = OptionalStringArg(info, 0, "kind");
  auto extra_key = OptionalStringArg(info, 1, "extraKey");
  auto cache_salt = OptionalStringArg(info, 2, "cacheSalt");
  if (kind == std::optional<std::string>("storage"))
    return DigestOrNull(env, kv::storage_namespace_seed(extra_key, cache_salt));
  if (kind == std::optional<std::string>("event"))
    return DigestOrNull(env, kv::event_namespace_seed(extra_key, cache_salt));
  ThrowRange(env, "kind must be \"storage\" or \"event\"");
}

// cacheSaltSeed(salt: string): Buffer
Napi::Value CacheSaltSeedFn(const Napi::CallbackInfo& info) {
  RequireArgs(info, 1, "cacheSaltSeed");
  auto salt = OptionalStringArg(info, 0, "cacheSalt");
  if (!salt) ThrowType(info.Env(), "cacheSalt must be a string");
  auto d = kv::cache_salt_seed(*salt);
  return Napi::Buffer<uint8_t>::Copy(info.Env(), d.data(), 32);
}

// mooncakeObjectKeys(digests, {prefix?, mla?, tpRank?, ppRank?, ppSize?, splitFactor?}): string[]
Napi::Value MooncakeObjectKeysFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireArgs(info, 2, "mooncakeObjectKeys");
  auto d = BytesArg(info, 0, "digests");
  if (d.length % 32) ThrowRange(env, "digests length must be a multiple of 32");
  if (!info[1].IsObject()) ThrowType(env, "layout must be an object");
  auto o = info[1].As<Napi::Object>();
  kv::MooncakeLayout l;
  auto u32 = [&](const char* key, uint32_t def) -> uint32_t {
    Napi::Value v = o.Get(key);
    if (v.IsUndefined()) return def;
    const double x = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
    if (!(x >= 0 && x <= 1e6) || x != double(uint32_t(x))) {
      ThrowRange(env, std::string("layout.") + key + " must be an integer in [0, 1e6]");
    }
    return uint32_t(x);
  };
  Napi::Value prefix = o.Get("prefix");
  if (!prefix.IsUndefined() && !prefix.IsNull()) {
    if (!prefix.IsString()) ThrowType(env, "layout.prefix must be a string");
    l.prefix = prefix.As<Napi::String>().Utf8Value();
  }
  Napi::Value mla = o.Get("mla");
  if (!mla.IsUndefined()) {
    if (!mla.IsBoolean()) ThrowType(env, "layout.mla must be a boolean");
    l.mla = mla.As<Napi::Boolean>().Value();
  }
  l.tp_rank = u32("tpRank", 0);
  l.pp_rank = u32("ppRank", 0);
  l.pp_size = u32("ppSize", 1);
  l.split_factor = u32("splitFactor", 0);
  std::vector<std::string> keys;
  for (size_t i = 0; i < d.length / 32; ++i) kv::mooncake_object_keys(kv::digest_hex(d.data + 32 * i), l, keys);
  auto out = Napi::Array::New(env, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out.Set(uint32_t(i), Napi::String::New(env, keys[i]));
  return out;
}

// xxh3(data: Uint8Array, seed: bigint): bigint
Napi::Value Xxh3Fn(const Napi::CallbackInfo& info) {
  RequireArgs(info, 2, "xxh3");
  auto data = BytesArg(info, 0, "data");
  const uint64_t seed = BigUintArg(info, 1, "seed");
  return Napi::BigInt::New(info.Env(), kv::xxh3_64(data.data, data.length, seed));
}

// dynamoSeed(loraName: string|null, cacheNamespace: string|null): bigint
Napi::Value DynamoSeedFn(const Napi::CallbackInfo& info) {
  auto lora = OptionalStringArg(info, 0, "loraName");
  auto ns = OptionalStringArg(info, 1, "cacheNamespace");
  return Napi::BigInt::New(info.Env(), kv::dynamo_seed(lora.value_or(""), ns.value_or("")));
}

// dynamoHashes(tokens, offsets|null, blockSize, eagle, seed: bigint)
//   -> { blockOffsets: Uint32Array, local: BigUint64Array, sequence: BigUint64Array }
Napi::Value DynamoHashesFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireArgs(info, 5, "dynamoHashes");
  auto tokens = TypedArg<const uint32_t>(info, 0, "tokens", napi_uint32_array, "Uint32Array");
  auto offsets = OffsetsArg(info, 1, "offsets", tokens.length);
  kv::DynamoBatch b;
  b.tokens = tokens.data;
  b.offsets = offsets.data();
  b.nseq = offsets.size() - 1;
  b.block_size = UintArg(info, 2, "blockSize", 1, 1u << 30);
  b.eagle = BoolArg(info, 3, "eagle");
  b.seed = BigUintArg(info, 4, "seed");
  std::vector<uint64_t> bo(b.nseq + 1);
  const uint64_t n = kv::dynamo_block_offsets(b, bo.data());
  CheckOutputBytes(env, n * 8, "dynamoHashes");
  auto local = Napi::BigUint64Array::New(env, n);
  auto seq = Napi::BigUint64Array::New(env, n);
  kv::dynamo_local_hashes(b, bo.data(), local.Data());
  for (size_t s = 0; s < b.nseq; ++s) {
    kv::dynamo_sequence_hashes(local.Data() + bo[s], bo[s + 1] - bo[s], seq.Data() + bo[s]);
  }
  auto result = Napi::Object::New(env);
  result.Set("blockOffsets", ToUint32Array(env, bo));
  result.Set("local", local);
  result.Set("sequence", seq);
  return result;
}

}  // namespace

void RegisterHash(Napi::Env env, Napi::Object exports) {
  exports.Set("sha256", Napi::Function::New(env, Sha256Fn, "sha256"));
  exports.Set("sha256Backend", Napi::Function::New(env, Sha256BackendFn, "sha256Backend"));
  exports.Set("setSha256Backend", Napi::Function::New(env, SetSha256BackendFn, "setSha256Backend"));
  exports.Set("sglangChain", Napi::Function::New(env, SglangChainFn, "sglangChain"));
  exports.Set("digestsToInt64", Napi::Function::New(env, DigestsToInt64Fn, "digestsToInt64"));
  exports.Set("digestsToHex", Napi::Function::New(env, DigestsToHexFn, "digestsToHex"));
  exports.Set("namespacedBlockHashes", Napi::Function::New(env, NamespacedBlockHashesFn, "namespacedBlockHashes"));
  exports.Set("namespaceSeed", Napi::Function::New(env, NamespaceSeedFn, "namespaceSeed"));
  exports.Set("cacheSaltSeed", Napi::Function::New(env, CacheSaltSeedFn, "cacheSaltSeed"));
  exports.Set("mooncakeObjectKeys", Napi::Function::New(env, MooncakeObjectKeysFn, "mooncakeObjectKeys"));
  exports.Set("xxh3", Napi::Function::New(env, Xxh3Fn, "xxh3"));
  exports.Set("dynamoSeed", Napi::Function::New(env, DynamoSeedFn, "dynamoSeed"));
  exports.Set("dynamoHashes", Napi::Function::New(env, DynamoHashesFn, "dynamoHashes"));
}

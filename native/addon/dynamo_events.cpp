// Glue for Dynamo's event-plane envelope (native/events/adapters/dynamo_envelope.h): one call
// decodes an envelope frame into flat columns in a caller-owned buffer; src/events/dynamo/decode.ts
// turns them into records.
#include <napi.h>

#include <cstring>

#include "../events/adapters/dynamo_envelope.h"
#include "args.h"

namespace {

using kv::events::dynamo::Frame;

size_t align8(size_t n) {
  return (n + 7) & ~size_t(7);
}

// decodeDynamoEnvelopeInto(envelope: Uint8Array, out: Uint8Array)
//   -> string[] (the storage tier names the records index) with the columns written into `out`:
//        i64[8] header [publisherId, sequence, flags (bit0 publisherId < 0, bit1 sequence < 0),
//        records, blocks, hashes, 0, 0], then per record u64 workerId, i64 eventId, i64 parent,
//        f64 dpRank; per block i64 blockHash, u64 tokensHash; i64 hashes (removals); per record
//        u32 begin, u32 end, u32 storage tier name, u8 kind (stored, removed, cleared), u8 tier,
//        u8 flags (bit0 has parent, bit1 eventId < 0); each section 8-byte aligned.
//      | -(bytes needed) when `out` is too small
//      | { error, field } when the frame is refused (field: the bad field's dotted path).
Napi::Value DecodeDynamoEnvelopeInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2) kvglue::ThrowType(env, "decodeDynamoEnvelopeInto: envelope and out are required");
  auto envelope = kvglue::BytesArg(info, 0, "envelope");
  auto out_arr = kvglue::TypedArg<uint8_t>(info, 1, "out", napi_uint8_array, "Uint8Array");
  thread_local Frame f;
  if (!kv::events::dynamo::decode_envelope(envelope.data, envelope.length, f)) {
    auto r = Napi::Object::New(env);
    r.Set("error", f.error_text);
    r.Set("field", f.error_field);
    return r;
  }
  const size_t n = f.records.size(), nb = f.blocks.size(), nh = f.hashes.size();
  size_t o = 64;
  const auto section = [&o](size_t bytes) {
    const size_t at = o;
    o += align8(bytes);
    return at;
  };
  const size_t o_worker = section(8 * n), o_event = section(8 * n), o_parent = section(8 * n), o_dp = section(8 * n);
  const size_t o_block = section(8 * nb), o_tokens = section(8 * nb), o_hashes = section(8 * nh);
  const size_t o_begin = section(4 * n), o_end = section(4 * n), o_name = section(4 * n);
  const size_t o_kind = section(n), o_tier = section(n), o_flags = section(n);
  if (o > out_arr.length) return Napi::Number::New(env, -static_cast<double>(o));
  uint8_t* out = out_arr.data;
  const int64_t head[8] = {static_cast<int64_t>(f.publisher_id.bits),
                           static_cast<int64_t>(f.sequence.bits),
                           (f.publisher_id.negative ? 1 : 0) | (f.sequence.negative ? 2 : 0),
                           static_cast<int64_t>(n),
                           static_cast<int64_t>(nb),
                           static_cast<int64_t>(nh),
                           0,
                           0};
  std::memcpy(out, head, sizeof head);
  std::vector<std::string_view> names;
  for (size_t i = 0; i < n; ++i) {
    const auto& r = f.records[i];
    uint32_t name = 0;
    while (name < names.size() && names[name] != r.storage_tier) ++name;
    if (name == names.size()) names.push_back(r.storage_tier);
    const int64_t event_id = static_cast<int64_t>(r.event_id.bits);
    const double dp = static_cast<double>(r.dp_rank);
    std::memcpy(out + o_worker + 8 * i, &r.worker_id, 8);
    std::memcpy(out + o_event + 8 * i, &event_id, 8);
    std::memcpy(out + o_parent + 8 * i, &r.parent, 8);
    std::memcpy(out + o_dp + 8 * i, &dp, 8);
    std::memcpy(out + o_begin + 4 * i, &r.begin, 4);
    std::memcpy(out + o_end + 4 * i, &r.end, 4);
    std::memcpy(out + o_name + 4 * i, &name, 4);
    out[o_kind + i] = r.kind;
    out[o_tier + i] = r.tier;
    out[o_flags + i] = (r.has_parent ? 1 : 0) | (r.event_id.negative ? 2 : 0);
  }
  for (size_t i = 0; i < nb; ++i) {
    std::memcpy(out + o_block + 8 * i, &f.blocks[i].block_hash, 8);
    std::memcpy(out + o_tokens + 8 * i, &f.blocks[i].tokens_hash, 8);
  }
  if (nh) std::memcpy(out + o_hashes, f.hashes.data(), 8 * nh);
  auto r = Napi::Array::New(env, names.size());
  for (uint32_t i = 0; i < names.size(); ++i) r[i] = Napi::String::New(env, names[i].data(), names[i].size());
  return r;
}

// dynamoTierOfStorage(name: string) -> index into TIERS, or -1 for a name kvctl does not know.
Napi::Value DynamoTierOfStorage(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) kvglue::ThrowType(env, "dynamoTierOfStorage: name must be a string");
  const std::string name = info[0].As<Napi::String>().Utf8Value();
  uint8_t tier;
  return Napi::Number::New(env, kv::events::dynamo::tier_of_storage(name, tier) ? tier : -1);
}

}  // namespace

void RegisterDynamoEvents(Napi::Env env, Napi::Object exports) {
  exports.Set("decodeDynamoEnvelopeInto",
              Napi::Function::New(env, DecodeDynamoEnvelopeInto, "decodeDynamoEnvelopeInto"));
  exports.Set("dynamoTierOfStorage", Napi::Function::New(env, DynamoTierOfStorage, "dynamoTierOfStorage"));
}

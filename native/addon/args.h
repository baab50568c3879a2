// Argument checking for the glue: every public function validates what JS passes and throws a
// JS TypeError/RangeError naming the argument; nothing reaches the core unchecked.
#pragma once
#include <napi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvglue {

[[noreturn]] inline void ThrowType(Napi::Env env, const std::string& msg) {
  throw Napi::TypeError::New(env, msg);
}
[[noreturn]] inline void ThrowRange(Napi::Env env, const std::string& msg) {
  throw Napi::RangeError::New(env, msg);
}

template <typename T>
struct View {
  T* data = nullptr;
  size_t length = 0;  // elements
};

// A typed array of the exact type (Uint32Array, BigInt64Array, ...) over a live buffer. One
// napi_get_typedarray_info call reads type, length and data (each accessor of Napi::TypedArray
// is a call of its own, and they made up most of a hot call's cost); a detached buffer reads as
// length 0, so only an empty view asks whether its buffer is detached.
// `v` named `name`, or `name[index]` for an element of a list (the name is built only to throw).
template <typename T>
View<T> TypedValue(Napi::Env env, napi_value v, const char* name, napi_typedarray_type type, const char* type_name,
                   long index = -1) {
  const auto named = [&] { return std::string(name) + (index >= 0 ? "[" + std::to_string(index) + "]" : ""); };
  napi_typedarray_type got;
  size_t length = 0;
  void* data = nullptr;
  napi_value buffer = nullptr;
  size_t offset = 0;
  if (napi_get_typedarray_info(env, v, &got, &length, &data, &buffer, &offset) != napi_ok || got != type) {
    ThrowType(env, named() + " must be a " + type_name);
  }
  if (length == 0) {
    bool detached = false;
    if (napi_is_detached_arraybuffer(env, buffer, &detached) != napi_ok || detached) {
      ThrowType(env, named() + ": its ArrayBuffer is detached");
    }
  }
  View<T> out;
  out.length = length;
  out.data = static_cast<T*>(data);
  if (out.length && !out.data) ThrowType(env, named() + ": no backing store");
  return out;
}

template <typename T>
View<T> TypedArg(const Napi::CallbackInfo& info, size_t i, const char* name, napi_typedarray_type type,
                 const char* type_name) {
  return TypedValue<T>(info.Env(), info[i], name, type, type_name);
}

inline View<const uint8_t> BytesArg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  return TypedArg<const uint8_t>(info, i, name, napi_uint8_array, "Uint8Array or Buffer");
}

inline std::optional<View<const uint8_t>> OptionalBytesArg(const Napi::CallbackInfo& info, size_t i, const char* name,
                                                           size_t exact_len) {
  if (info[i].IsNull() || info[i].IsUndefined()) return std::nullopt;
  auto v = BytesArg(info, i, name);
  if (v.length != exact_len) {
    ThrowRange(info.Env(), std::string(name) + " must be exactly " + std::to_string(exact_len) + " bytes (got " +
                               std::to_string(v.length) + ")");
  }
  return v;
}

inline uint32_t UintArg(const Napi::CallbackInfo& info, size_t i, const char* name, uint32_t min, uint32_t max) {
  Napi::Env env = info.Env();
  if (!info[i].IsNumber()) ThrowType(env, std::string(name) + " must be a number");
  const double d = info[i].As<Napi::Number>().DoubleValue();
  if (!(d >= min && d <= max) || d != static_cast<double>(static_cast<uint64_t>(d))) {
    ThrowRange(env, std::string(name) + " must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                        "] (got " + info[i].ToString().Utf8Value() + ")");
  }
  return static_cast<uint32_t>(d);
}

inline bool BoolArg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info[i].IsUndefined()) return false;
  if (!info[i].IsBoolean()) ThrowType(info.Env(), std::string(name) + " must be a boolean");
  return info[i].As<Napi::Boolean>().Value();
}

inline std::optional<std::string> OptionalStringArg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (info[i].IsNull() || info[i].IsUndefined()) return std::nullopt;
  if (!info[i].IsString()) ThrowType(info.Env(), std::string(name) + " must be a string or null");
  return info[i].As<Napi::String>().Utf8Value();
}

inline uint64_t BigUintArg(const Napi::CallbackInfo& info, size_t i, const char* name) {
  if (!info[i].IsBigInt()) ThrowType(info.Env(), std::string(name) + " must be a bigint");
  bool lossless = false;
  const uint64_t v = info[i].As<Napi::BigInt>().Uint64Value(&lossless);
  if (!lossless) ThrowRange(info.Env(), std::string(name) + " must be in [0, 2^64)");
  return v;
}

// Sequence boundaries: offsets (Uint32Array, nseq + 1 entries, non-decreasing, last <= ntokens)
// or null/undefined for one sequence over all tokens.
inline std::vector<uint64_t> OffsetsArg(const Napi::CallbackInfo& info, size_t i, const char* name, size_t ntokens) {
  Napi::Env env = info.Env();
  if (info[i].IsNull() || info[i].IsUndefined()) return {0, ntokens};
  auto v = TypedArg<const uint32_t>(info, i, name, napi_uint32_array, "Uint32Array");
  if (v.length < 1) ThrowRange(env, std::string(name) + " must have at least one entry");
  std::vector<uint64_t> out(v.data, v.data + v.length);
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k] > ntokens) {
      ThrowRange(env, std::string(name) + "[" + std::to_string(k) + "] = " + std::to_string(out[k]) +
                          " is past the end of the tokens (" + std::to_string(ntokens) + ")");
    }
    if (k > 0 && out[k] < out[k - 1]) {
      ThrowRange(env, std::string(name) + " must be non-decreasing (at index " + std::to_string(k) + ")");
    }
  }
  return out;
}

inline void RequireArgs(const Napi::CallbackInfo& info, size_t n, const char* fn) {
  if (info.Length() < n) {
    ThrowType(info.Env(), std::string(fn) + " expects " + std::to_string(n) + " arguments");
  }
}

// The error text of every CUDA entry point in an addon built without CUDA.
inline constexpr const char* kNoCuda =
    "this kvctl addon was built without CUDA (run `npm run build:cuda` on a host with nvcc)";

// Page/block offsets (64-bit in the core) as the Uint32Array JS gets.
inline Napi::Uint32Array ToUint32Array(Napi::Env env, const std::vector<uint64_t>& v) {
  auto out = Napi::Uint32Array::New(env, v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<uint32_t>(v[i]);
  return out;
}

// Output sizes are checked before allocating so a huge request is a RangeError, not an abort.
inline void CheckOutputBytes(Napi::Env env, uint64_t bytes, const char* what) {
  constexpr uint64_t kMax = uint64_t(1) << 32;  // Node's Buffer limit on 64-bit hosts
  if (bytes > kMax)
    ThrowRange(env, std::string(what) + " output would be " + std::to_string(bytes) + " bytes; split the batch");
}

}  // namespace kvglue

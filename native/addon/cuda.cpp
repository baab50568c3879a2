// JS bindings of the CUDA path. Without a CUDA build, or without a device/driver at run time,
// every call throws a plain JS Error ("CUDA unavailable: <name> (<code>)"), never aborts.
#include <cstring>

#include "args.h"
#include "register.h"
#include "sglang_chain.h"

#ifdef KVCTL_WITH_CUDA
#include "sglang_chain_cuda.h"
#endif

using namespace kvglue;

namespace {

// cudaInfo(): { built: boolean, available: boolean, devices: number, error?: string }
Napi::Value CudaInfoFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
#ifdef KVCTL_WITH_CUDA
  int count = 0;
  kv::CudaStatus st = kv::cuda_device_count(&count);
  o.Set("built", true);
  o.Set("available", st.ok());
  o.Set("devices", count);
  if (!st.ok()) o.Set("error", "CUDA unavailable: " + st.name + " (" + std::to_string(st.code) + ")");
#else
  o.Set("built", false);
  o.Set("available", false);
  o.Set("devices", 0);
  o.Set("error", "CUDA unavailable: this kvctl addon was built without CUDA (run `npm run build:cuda` on a host with nvcc)");
#endif
  return o;
}

// sglangChainCuda(tokens, offsets|null, pageSize, bigram, prior|null): same result as sglangChain.
Napi::Value SglangChainCudaFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RequireArgs(info, 3, "sglangChainCuda");
  auto tokens = TypedArg<const uint32_t>(info, 0, "tokens", napi_uint32_array, "Uint32Array");
  auto offsets = OffsetsArg(info, 1, "offsets", tokens.length);
  const uint32_t page_size = UintArg(info, 2, "pageSize", 1, 1u << 30);
  const bool bigram = BoolArg(info, 3, "bigram");
  auto prior = OptionalBytesArg(info, 4, "prior", 32);
#ifdef KVCTL_WITH_CUDA
  kv::ChainBatch b;
  b.tokens = tokens.data;
  b.offsets = offsets.data();
  b.nseq = offsets.size() - 1;
  b.page_size = page_size;
  b.bigram = bigram;
  std::vector<uint64_t> page_offsets(b.nseq + 1);
  const uint64_t pages = kv::sglang_page_offsets(b, page_offsets.data());
  CheckOutputBytes(env, pages * 32, "sglangChainCuda");
  std::vector<uint8_t> out(pages * 32);
  kv::CudaStatus st = kv::cuda_sglang_chain(tokens.data, tokens.length, offsets.data(), b.nseq,
                                            page_offsets.data(), page_size, bigram,
                                            prior ? prior->data : nullptr, out.data());
  if (!st.ok()) {
    throw Napi::Error::New(env, "CUDA unavailable: " + st.name + " (" + std::to_string(st.code) + "): " + st.message);
  }
  auto result = Napi::Object::New(env);
  auto po = Napi::Uint32Array::New(env, page_offsets.size());
  for (size_t i = 0; i < page_offsets.size(); ++i) po[i] = uint32_t(page_offsets[i]);
  result.Set("pageOffsets", po);
  result.Set("digests", Napi::Buffer<uint8_t>::Copy(env, out.data(), out.size()));
  return result;
#else
  (void)offsets; (void)page_size; (void)bigram; (void)prior;
  throw Napi::Error::New(env, "CUDA unavailable: this kvctl addon was built without CUDA (run `npm run build:cuda` on a host with nvcc)");
#endif
}

}  // namespace

void RegisterCuda(Napi::Env env, Napi::Object exports) {
  exports.Set("cudaInfo", Napi::Function::New(env, CudaInfoFn, "cudaInfo"));
  exports.Set("sglangChainCuda", Napi::Function::New(env, SglangChainCudaFn, "sglangChainCuda"));
}

// JS bindings of the CUDA path. Without a CUDA build, or without a device/driver at run time,
// every call throws a plain JS Error ("CUDA unavailable: <name> (<code>)"), never aborts.
#include <cstring>

#include "args.h"
#include "chain_args.h"
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
  o.Set("error", std::string("CUDA unavailable: ") + kNoCuda);
#endif
  return o;
}

// sglangChainCuda(tokens, offsets|null, pageSize, bigram, prior|null): same result as sglangChain.
Napi::Value SglangChainCudaFn(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const ChainArgs a(info, "sglangChainCuda");
#ifdef KVCTL_WITH_CUDA
  auto digests = Napi::Buffer<uint8_t>::New(env, a.pages * 32);
  kv::CudaStatus st =
      kv::cuda_sglang_chain(a.tokens.data, a.tokens.length, a.offsets.data(), a.batch.nseq, a.page_offsets.data(),
                            a.batch.page_size, a.batch.bigram, a.batch.prior, digests.Data());
  if (!st.ok()) {
    throw Napi::Error::New(env, "CUDA unavailable: " + st.name + " (" + std::to_string(st.code) + "): " + st.message);
  }
  auto result = Napi::Object::New(env);
  result.Set("pageOffsets", ToUint32Array(env, a.page_offsets));
  result.Set("digests", digests);
  return result;
#else
  (void)a;
  throw Napi::Error::New(env, std::string("CUDA unavailable: ") + kNoCuda);
#endif
}

}  // namespace

void RegisterCuda(Napi::Env env, Napi::Object exports) {
  exports.Set("cudaInfo", Napi::Function::New(env, CudaInfoFn, "cudaInfo"));
  exports.Set("sglangChainCuda", Napi::Function::New(env, SglangChainCudaFn, "sglangChainCuda"));
}

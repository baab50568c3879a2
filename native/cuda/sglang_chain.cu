// CUDA SGLang page chains: one thread per sequence (a chain is sequential), many sequences in
// flight. The page digest is the shared __host__ __device__ code in native/core.
#include <cuda_runtime.h>

#include "page_message.h"
#include "sglang_chain_cuda.h"

namespace kv {
namespace {

__global__ void sglang_chain_kernel(const uint32_t* tokens, const uint64_t* offsets, size_t nseq,
                                    const uint64_t* page_offsets, uint32_t page_size, bool bigram, const uint8_t* prior,
                                    uint8_t* out) {
  const size_t s = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (s >= nseq) return;
  sglang_chain_one(tokens + offsets[s], page_offsets[s + 1] - page_offsets[s], page_size, bigram, prior,
                   out + 32 * page_offsets[s], [](const PageMessage& m, uint8_t* o) { page_digest_portable(m, o); });
}

CudaStatus status_of(cudaError_t e) {
  CudaStatus s;
  s.code = int(e);
  if (e != cudaSuccess) {
    s.name = cudaGetErrorName(e);
    s.message = cudaGetErrorString(e);
  }
  return s;
}

// Device buffers freed on every path.
struct DeviceBuffers {
  void* ptrs[5] = {};
  ~DeviceBuffers() {
    for (void* p : ptrs)
      if (p) cudaFree(p);
  }
};

}  // namespace

CudaStatus cuda_device_count(int* count) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e == cudaSuccess && *count == 0) e = cudaErrorNoDevice;
  return status_of(e);
}

CudaStatus cuda_sglang_chain(const uint32_t* tokens, size_t ntokens, const uint64_t* offsets, size_t nseq,
                             const uint64_t* page_offsets, uint32_t page_size, bool bigram, const uint8_t* prior,
                             uint8_t* out) {
  int count = 0;
  CudaStatus st = cuda_device_count(&count);
  if (!st.ok()) return st;
  const size_t pages = page_offsets[nseq];
  DeviceBuffers b;
  const size_t sizes[5] = {ntokens * 4 + 4, (nseq + 1) * 8, (nseq + 1) * 8, 32, pages * 32 + 32};
  for (int i = 0; i < 5; ++i) {
    cudaError_t e = cudaMalloc(&b.ptrs[i], sizes[i]);
    if (e != cudaSuccess) return status_of(e);
  }
  const void* src[4] = {tokens, offsets, page_offsets, prior};
  const size_t copy[4] = {ntokens * 4, (nseq + 1) * 8, (nseq + 1) * 8, prior ? 32u : 0u};
  for (int i = 0; i < 4; ++i) {
    if (!copy[i]) continue;
    cudaError_t e = cudaMemcpy(b.ptrs[i], src[i], copy[i], cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return status_of(e);
  }
  if (nseq > 0) {
    const unsigned threads = 128;
    const unsigned blocks = unsigned((nseq + threads - 1) / threads);
    sglang_chain_kernel<<<blocks, threads>>>(
        static_cast<const uint32_t*>(b.ptrs[0]), static_cast<const uint64_t*>(b.ptrs[1]), nseq,
        static_cast<const uint64_t*>(b.ptrs[2]), page_size, bigram,
        prior ? static_cast<const uint8_t*>(b.ptrs[3]) : nullptr, static_cast<uint8_t*>(b.ptrs[4]));
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) return status_of(e);
  }
  if (pages) {
    cudaError_t e = cudaMemcpy(out, b.ptrs[4], pages * 32, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return status_of(e);
  }
  return status_of(cudaSuccess);
}

}  // namespace kv

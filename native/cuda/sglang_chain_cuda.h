// Host-side entry of the CUDA SGLang chain kernel. Plain C++ (no CUDA headers) so the addon
// glue compiles the same with or without the CUDA build.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kv {

struct CudaStatus {
  int code = 0;          // cudaError_t; 0 = success
  std::string name;      // cudaGetErrorName
  std::string message;   // cudaGetErrorString
  bool ok() const { return code == 0; }
};

// Number of usable CUDA devices, or the error that prevents using any.
CudaStatus cuda_device_count(int* count);

// Hash `nseq` sequences on the GPU: one thread per sequence, pages sequential in the thread
// (the same page_digest_portable the CPU build tests). Inputs/outputs are host memory.
CudaStatus cuda_sglang_chain(const uint32_t* tokens, size_t ntokens, const uint64_t* offsets, size_t nseq,
                             const uint64_t* page_offsets, uint32_t page_size, bool bigram,
                             const uint8_t* prior /* 32 B or null */, uint8_t* out);

}  // namespace kv

// KV_HD marks code shared by the CPU build and the CUDA kernels, so the CPU tests exercise the
// exact code the GPU runs.
#pragma once
#if defined(__CUDACC__)
#define KV_HD __host__ __device__
#define KV_INLINE __forceinline__
#else
#define KV_HD
#define KV_INLINE inline
#endif

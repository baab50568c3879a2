// CUDA page pools and batched page copies; the CPU twin of everything here is
// native/core/copy_plan.cpp, and both run the index arithmetic of native/core/layout_pool.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <limits>

#include "copy_cuda.h"
#include "copy_digest.h"
#include "layout_pool.h"

namespace kv {
namespace copy {
namespace cuda {

namespace {

Status cuda_status(cudaError_t e, const char* what) {
  Status s;
  s.code = ErrCode::Cuda;
  s.cuda_code = int(e);
  const char* name = cudaGetErrorName(e);
  const char* str = cudaGetErrorString(e);
  s.cuda_name = name ? name : "cudaErrorUnknown";
  s.message =
      "CUDA error " + s.cuda_name + " (" + std::to_string(int(e)) + "): " + (str ? str : "") + " [in " + what + "]";
  if (e == cudaErrorMemoryAllocation) s.code = ErrCode::NoMemory;
  return s;
}

#define KV_CK(call)                                            \
  do {                                                         \
    cudaError_t e_ = (call);                                   \
    if (e_ != cudaSuccess) {                                   \
      (void)cudaGetLastError(); /* clear a non-sticky error */ \
      return cuda_status(e_, #call);                           \
    }                                                          \
  } while (0)

struct StreamGuard {
  cudaStream_t s = nullptr;
  ~StreamGuard() {
    if (s) cudaStreamDestroy(s);
  }
};
struct DevBuf {
  void* p = nullptr;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};
struct HostBuf {
  void* p = nullptr;
  ~HostBuf() {
    if (p) cudaFreeHost(p);
  }
};

// One warp per work item (chunk of a page pair); lanes stride through the chunk.
template <typename V>
__global__ void copy_kernel(CopyArgs a) {
  const uint64_t warps = uint64_t(gridDim.x) * (blockDim.x / 32);
  const uint32_t lane = threadIdx.x % 32;
  const uint64_t nv = a.chunk_bytes / sizeof(V);
  const uint64_t items = a.items();
  for (uint64_t w = (uint64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; w < items; w += warps) {
    const uint8_t* s;
    uint8_t* d;
    a.item(w, &s, &d);
    const V* sv = reinterpret_cast<const V*>(s);
    V* dv = reinterpret_cast<V*>(d);
    for (uint64_t k = lane; k < nv; k += 32) dv[k] = sv[k];
  }
}

__global__ void digest_kernel(Layout L, const uint8_t* base, uint64_t pages, const uint32_t* idx, uint64_t n,
                              uint8_t* out) {
  const uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) page_digest_stream(L, base, pages, idx[i], out + 32 * i);
}

__global__ void fill_kernel(uint8_t* base, uint64_t bytes, uint64_t seed) {
  const uint64_t words = bytes / 8;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  uint64_t* w64 = reinterpret_cast<uint64_t*>(base);
  for (uint64_t w = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; w < words; w += stride) {
    w64[w] = fill_word(seed, w);  // device and host are both little-endian
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && bytes % 8) {
    const uint64_t v = fill_word(seed, words);
    for (uint64_t k = 0; k < bytes % 8; ++k) base[8 * words + k] = uint8_t(v >> (8 * k));
  }
}

int sm_count(int dev) {
  int n = 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) n = 80;
  return n;
}

unsigned grid_for(uint64_t work, unsigned per_block, int dev) {
  const uint64_t want = (work + per_block - 1) / per_block;
  const uint64_t cap = uint64_t(sm_count(dev)) * 16;
  return unsigned(std::max<uint64_t>(1, std::min(want, cap)));
}

// The largest pitch cudaMemcpy2D accepts; rows beyond it are copied one by one.
constexpr uint64_t kMaxPitch = (uint64_t(1) << 31) - 1;

}  // namespace

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  cudaRuntimeGetVersion(&info.runtime_version);
  cudaDriverGetVersion(&info.driver_version);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    info.status = cuda_status(e, "cudaGetDeviceCount");
    return info;
  }
  info.device_count = n;
  for (int d = 0; d < n; ++d) {
    DeviceInfo di;
    di.index = d;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) == cudaSuccess) {
      di.name = p.name;
      di.cc_major = p.major;
      di.cc_minor = p.minor;
      di.total_bytes = p.totalGlobalMem;
      di.sm_count = p.multiProcessorCount;
      char bus[32] = {0};
      if (cudaDeviceGetPCIBusId(bus, sizeof bus, d) == cudaSuccess) di.pci_bus_id = bus;
    }
    size_t fr = 0, tot = 0;
    if (cudaSetDevice(d) == cudaSuccess && cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
      di.free_bytes = fr;
      di.total_bytes = tot;
    }
    (void)cudaGetLastError();
    info.devices.push_back(di);
  }
  return info;
}

Status check_device(int dev) {
  int n = 0;
  KV_CK(cudaGetDeviceCount(&n));
  if (dev < 0 || dev >= n) {
    return Status::Error(ErrCode::Device, "CUDA device " + std::to_string(dev) + " does not exist (" +
                                              std::to_string(n) + " device(s))");
  }
  KV_CK(cudaSetDevice(dev));
  return {};
}

Status alloc_device(int dev, uint64_t bytes, void** out) {
  Status s = check_device(dev);
  if (!s.ok()) return s;
  KV_CK(cudaMalloc(out, bytes));
  return {};
}

Status alloc_pinned(int dev, uint64_t bytes, void** out) {
  Status s = check_device(dev);
  if (!s.ok()) return s;
  // Mapped + portable: the copy kernel reads/writes it directly (UVA), from any device.
  KV_CK(cudaHostAlloc(out, bytes, cudaHostAllocPortable | cudaHostAllocMapped));
  return {};
}

void free_device(int dev, void* p) {
  if (!p) return;
  cudaSetDevice(dev);
  cudaFree(p);
  (void)cudaGetLastError();
}

void free_pinned(void* p) {
  if (!p) return;
  cudaFreeHost(p);
  (void)cudaGetLastError();
}

Status execute(int dev, const CopyPlan& plan, const uint8_t* src, const Layout& sl, uint64_t src_pages, uint8_t* dst,
               const Layout& dl, uint64_t dst_pages) {
  if (plan.pages == 0) return {};
  Status s = check_device(dev);
  if (!s.ok()) return s;
  StreamGuard st;
  KV_CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  // Coalesced runs: one 2D copy each (rows = native segments of the page run).
  for (const Run& r : plan.runs) {
    const RunGeom g = run_geom(sl, src_pages, dst_pages, r.src_page, r.dst_page, r.count);
    if (g.rows == 1 || g.src_pitch > kMaxPitch || g.dst_pitch > kMaxPitch) {
      for (uint64_t row = 0; row < g.rows; ++row) {
        KV_CK(cudaMemcpyAsync(dst + g.dst_off + row * g.dst_pitch, src + g.src_off + row * g.src_pitch, g.width,
                              cudaMemcpyDefault, st.s));
      }
    } else {
      KV_CK(cudaMemcpy2DAsync(dst + g.dst_off, g.dst_pitch, src + g.src_off, g.src_pitch, g.width, g.rows,
                              cudaMemcpyDefault, st.s));
    }
  }
  // Scattered pages: the kernel, page indices uploaded to the device straight from the plan's
  // vectors (the plan outlives the stream sync below).
  DevBuf idx;
  const uint64_t n = plan.kern_src.size();
  if (n) {
    KV_CK(cudaMalloc(&idx.p, 2 * n * sizeof(uint32_t)));
    uint32_t* const didx = static_cast<uint32_t*>(idx.p);
    KV_CK(cudaMemcpyAsync(didx, plan.kern_src.data(), n * sizeof(uint32_t), cudaMemcpyHostToDevice, st.s));
    KV_CK(cudaMemcpyAsync(didx + n, plan.kern_dst.data(), n * sizeof(uint32_t), cudaMemcpyHostToDevice, st.s));
    const CopyArgs a = kernel_args(plan, src, sl, src_pages, dst, dl, dst_pages, didx, didx + n);
    const uint64_t tb = sl.token_bytes();  // every chunk offset and size is a multiple of it
    const unsigned threads = 256;
    const unsigned grid = grid_for(a.items(), threads / 32, dev);
    if (tb % 16 == 0) copy_kernel<uint4><<<grid, threads, 0, st.s>>>(a);
    else if (tb % 4 == 0) copy_kernel<uint32_t><<<grid, threads, 0, st.s>>>(a);
    else copy_kernel<uint8_t><<<grid, threads, 0, st.s>>>(a);
    KV_CK(cudaGetLastError());
  }
  KV_CK(cudaStreamSynchronize(st.s));
  return {};
}

Status digests(int dev, const Layout& L, const uint8_t* base, uint64_t pages, const uint32_t* idx, size_t n,
               uint8_t* out) {
  if (n == 0) return {};
  Status s = check_device(dev);
  if (!s.ok()) return s;
  StreamGuard st;
  KV_CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  DevBuf didx, dout;
  KV_CK(cudaMalloc(&didx.p, n * sizeof(uint32_t)));
  KV_CK(cudaMalloc(&dout.p, n * 32));
  KV_CK(cudaMemcpyAsync(didx.p, idx, n * sizeof(uint32_t), cudaMemcpyHostToDevice, st.s));
  const unsigned threads = 64;
  const unsigned grid = unsigned((n + threads - 1) / threads);
  digest_kernel<<<grid, threads, 0, st.s>>>(L, base, pages, static_cast<const uint32_t*>(didx.p), n,
                                            static_cast<uint8_t*>(dout.p));
  KV_CK(cudaGetLastError());
  KV_CK(cudaMemcpyAsync(out, dout.p, n * 32, cudaMemcpyDeviceToHost, st.s));
  KV_CK(cudaStreamSynchronize(st.s));
  return {};
}

Status fill(int dev, uint8_t* base, uint64_t bytes, uint64_t seed) {
  Status s = check_device(dev);
  if (!s.ok()) return s;
  StreamGuard st;
  KV_CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  const unsigned threads = 256;
  fill_kernel<<<grid_for(bytes / 8 + 1, threads, dev), threads, 0, st.s>>>(base, bytes, seed);
  KV_CK(cudaGetLastError());
  KV_CK(cudaStreamSynchronize(st.s));
  return {};
}

Status copy_bytes(int dev, void* dst, const void* src, uint64_t bytes) {
  Status s = check_device(dev);
  if (!s.ok()) return s;
  StreamGuard st;
  KV_CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  KV_CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st.s));
  KV_CK(cudaStreamSynchronize(st.s));
  return {};
}

Status bench_memcpy(int dev, uint64_t bytes, bool device_to_host, uint32_t iters, double* seconds) {
  Status s = check_device(dev);
  if (!s.ok()) return s;
  DevBuf d;
  HostBuf h;
  StreamGuard st;
  KV_CK(cudaMalloc(&d.p, bytes));
  KV_CK(cudaHostAlloc(&h.p, bytes, cudaHostAllocPortable));
  KV_CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  KV_CK(cudaEventCreate(&e0));
  cudaError_t e = cudaEventCreate(&e1);
  if (e != cudaSuccess) {
    cudaEventDestroy(e0);
    return cuda_status(e, "cudaEventCreate");
  }
  double best = std::numeric_limits<double>::infinity();
  for (uint32_t i = 0; i <= iters && e == cudaSuccess; ++i) {  // iteration 0 warms up
    e = cudaEventRecord(e0, st.s);
    if (e == cudaSuccess)
      e = device_to_host ? cudaMemcpyAsync(h.p, d.p, bytes, cudaMemcpyDeviceToHost, st.s)
                         : cudaMemcpyAsync(d.p, h.p, bytes, cudaMemcpyHostToDevice, st.s);
    if (e == cudaSuccess) e = cudaEventRecord(e1, st.s);
    if (e == cudaSuccess) e = cudaEventSynchronize(e1);
    float ms = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
    if (e == cudaSuccess && i > 0) best = std::min(best, double(ms) / 1e3);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (e != cudaSuccess) return cuda_status(e, "bench_memcpy");
  *seconds = best;
  return {};
}

}  // namespace cuda
}  // namespace copy
}  // namespace kv

// CUDA page pools and batched copies (copy_cuda.cu). Plain C++ interface: the addon includes it
// without CUDA headers. Every function reports CUDA failures as a Status carrying the error's
// name and code (never an abort), including "no driver" / "no device" on hosts without a GPU.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "copy_plan.h"

namespace kv {
namespace copy {
namespace cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string pci_bus_id;
  int cc_major = 0, cc_minor = 0;
  uint64_t total_bytes = 0, free_bytes = 0;
  int sm_count = 0;
};

struct RuntimeInfo {
  int runtime_version = 0;  // e.g. 13000 = 13.0 (the static cudart this addon carries)
  int driver_version = 0;   // 0: no driver
  int device_count = 0;
  Status status;            // why no devices, when none
  std::vector<DeviceInfo> devices;
};

RuntimeInfo runtime_info();
// Usable device `dev` (count checked), or the error that explains why not.
Status check_device(int dev);

Status alloc_device(int dev, uint64_t bytes, void** out);
Status alloc_pinned(int dev, uint64_t bytes, void** out);
void free_device(int dev, void* p);
void free_pinned(void* p);

// Executes a plan on `dev`: coalesced runs as cudaMemcpy2DAsync, scattered pages with the copy
// kernel, on a stream of its own; returns once the stream has completed (call it from a worker
// thread, never the JS thread).
Status execute(int dev, const CopyPlan& plan, const uint8_t* src, const Layout& sl, uint64_t src_pages, uint8_t* dst,
               const Layout& dl, uint64_t dst_pages);
// Page digests computed on the GPU (one thread per page, the core's portable SHA-256).
Status digests(int dev, const Layout& L, const uint8_t* base, uint64_t pages, const uint32_t* idx, size_t n,
               uint8_t* out);
Status fill(int dev, uint8_t* base, uint64_t bytes, uint64_t seed);
Status copy_bytes(int dev, void* dst, const void* src, uint64_t bytes);  // any direction
// cudaMemcpyAsync of one contiguous device <-> pinned buffer of `bytes`: the link's practical
// limit; best of `iters` in seconds.
Status bench_memcpy(int dev, uint64_t bytes, bool device_to_host, uint32_t iters, double* seconds);

}  // namespace cuda
}  // namespace copy
}  // namespace kv

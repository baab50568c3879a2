// Batched page copies between pools: input checking, the copy plan (coalesced runs + scattered
// pairs for the kernel) and the CPU twin that executes a plan on ordinary host memory. The CUDA
// path (native/cuda/copy_cuda.cu) executes the very same plan.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "layout_pool.h"

namespace kv {
namespace copy {

enum class ErrCode { Ok = 0, Arg, Range, Duplicate, Layout, Device, Freed, Cuda, NoMemory };
const char* err_code_name(ErrCode c);  // "E_ARG", "E_RANGE", ...

struct Status {
  ErrCode code = ErrCode::Ok;
  std::string message;
  int cuda_code = 0;           // set when code == Cuda
  std::string cuda_name;       // e.g. "cudaErrorInvalidValue"
  bool ok() const { return code == ErrCode::Ok; }
  static Status Error(ErrCode c, std::string m) {
    Status s;
    s.code = c;
    s.message = std::move(m);
    return s;
  }
};

const char* layout_kind_name(LayoutKind k);             // "layer_first", ...
bool parse_layout_kind(const std::string& s, LayoutKind* out);
// Rejects zero-sized or absurd layouts (every dim >= 1, kv in {1, 2}, dtype_size in 1..16,
// a page under 2^40 bytes) and pool sizes (pages >= 1, < 2^32, bytes < 2^50).
Status validate_layout(const Layout& L);
Status validate_pool(const Layout& L, uint64_t pages);
std::string describe_layout(const Layout& L);
// Explains how two layouts' dims differ ("headDim 128 vs 64"), empty when same_dims.
std::string dims_mismatch(const Layout& a, const Layout& b);

struct Run {
  uint32_t src_page, dst_page, count;
};

struct CopyPlan {
  Gran gran = Gran::Native;
  std::vector<Run> runs;            // coalesced runs (same layout kind only)
  std::vector<uint32_t> kern_src;   // scattered pairs, executed chunk by chunk (the kernel)
  std::vector<uint32_t> kern_dst;
  uint64_t pages = 0;
  uint64_t bytes = 0;
  uint64_t coalesced_pages() const;
};

// The plan's scattered pairs as the kernel and the CPU twin both execute them: si/di are
// plan.kern_src/kern_dst where the copy runs (the host vectors, or their copies on the device).
inline CopyArgs kernel_args(const CopyPlan& plan, const uint8_t* src, const Layout& sl, uint64_t src_pages,
                            uint8_t* dst, const Layout& dl, uint64_t dst_pages, const uint32_t* si,
                            const uint32_t* di) {
  CopyArgs a;
  a.src = src;
  a.dst = dst;
  a.src_layout = sl;
  a.dst_layout = dl;
  a.src_pages = src_pages;
  a.dst_pages = dst_pages;
  a.src_idx = si;
  a.dst_idx = di;
  a.n = plan.kern_src.size();
  a.gran = plan.gran;
  a.cpp = chunks_per_page(sl, plan.gran);
  a.chunk_bytes = chunk_bytes(sl, plan.gran);
  return a;
}

struct PlanOptions {
  // Runs of at least this many consecutive pages (on both sides) become coalesced copies; shorter
  // ones go to the kernel. 0 disables coalescing (everything through the kernel).
  uint32_t coalesce_min_pages = 2;
};

// Checks a batch (lengths equal, indices in range, no duplicate destination page, and for a copy
// within one pool no page both read and written) and plans it.
Status plan_copy(const Layout& src, uint64_t src_pages, const Layout& dst, uint64_t dst_pages, const uint32_t* src_idx,
                 size_t n_src, const uint32_t* dst_idx, size_t n_dst, bool same_pool, const PlanOptions& opt,
                 CopyPlan* out);

// Page indices in range (for digests).
Status check_pages(const uint32_t* idx, size_t n, uint64_t pages, const char* what);

// ---- The CPU twin --------------------------------------------------------------------------
void cpu_execute(const CopyPlan& plan, const uint8_t* src, const Layout& sl, uint64_t src_pages, uint8_t* dst,
                 const Layout& dl, uint64_t dst_pages);
// Digests of the given pages (32 bytes each, canonical order, kv::Sha256: SHA-NI when present).
void cpu_digests(const Layout& L, const uint8_t* base, uint64_t pages, const uint32_t* idx, size_t n, uint8_t* out);
// Same through the portable streaming hasher the GPU kernel uses (tests compare the two).
void cpu_digests_portable(const Layout& L, const uint8_t* base, uint64_t pages, const uint32_t* idx, size_t n,
                          uint8_t* out);
void cpu_fill(uint8_t* base, uint64_t bytes, uint64_t seed);

// A contiguous memcpy of `bytes`, `iters` times: the CPU twin's baseline; returns seconds (best).
double cpu_memcpy_baseline(uint64_t bytes, uint32_t iters);

}  // namespace copy
}  // namespace kv

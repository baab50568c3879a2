#include "copy_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "copy_digest.h"
#include "sha256.h"

namespace kv {
namespace copy {

const char* err_code_name(ErrCode c) {
  switch (c) {
    case ErrCode::Ok:
      return "OK";
    case ErrCode::Arg:
      return "E_ARG";
    case ErrCode::Range:
      return "E_RANGE";
    case ErrCode::Duplicate:
      return "E_DUPLICATE";
    case ErrCode::Layout:
      return "E_LAYOUT";
    case ErrCode::Device:
      return "E_DEVICE";
    case ErrCode::Freed:
      return "E_FREED";
    case ErrCode::Cuda:
      return "E_CUDA";
    case ErrCode::NoMemory:
      return "E_NOMEM";
  }
  return "E_UNKNOWN";
}

const char* layout_kind_name(LayoutKind k) {
  switch (k) {
    case LayoutKind::LayerFirst:
      return "layer_first";
    case LayoutKind::PageFirst:
      return "page_first";
    case LayoutKind::PageFirstDirect:
      return "page_first_direct";
  }
  return "?";
}

bool parse_layout_kind(const std::string& s, LayoutKind* out) {
  if (s == "layer_first") *out = LayoutKind::LayerFirst;
  else if (s == "page_first") *out = LayoutKind::PageFirst;
  else if (s == "page_first_direct") *out = LayoutKind::PageFirstDirect;
  else return false;
  return true;
}

std::string describe_layout(const Layout& L) {
  return std::string(layout_kind_name(L.kind)) + "{pageSize=" + std::to_string(L.page_size) +
         ", layers=" + std::to_string(L.layers) + ", kv=" + std::to_string(L.kv) +
         ", heads=" + std::to_string(L.heads) + ", headDim=" + std::to_string(L.head_dim) +
         ", dtypeSize=" + std::to_string(L.dtype_size) + "}";
}

Status validate_layout(const Layout& L) {
  struct F {
    const char* name;
    uint32_t v;
  } fields[] = {{"pageSize", L.page_size},
                {"layers", L.layers},
                {"heads", L.heads},
                {"headDim", L.head_dim},
                {"dtypeSize", L.dtype_size}};
  for (auto& f : fields) {
    if (f.v == 0)
      return Status::Error(ErrCode::Layout, std::string("layout.") + f.name + " must be >= 1 (zero-sized layout)");
  }
  if (L.kv != 1 && L.kv != 2)
    return Status::Error(ErrCode::Layout, "layout.kv must be 1 (MLA) or 2 (K and V), got " + std::to_string(L.kv));
  if (L.dtype_size > 16)
    return Status::Error(ErrCode::Layout, "layout.dtypeSize must be <= 16, got " + std::to_string(L.dtype_size));
  if (L.kind != LayoutKind::LayerFirst && L.kind != LayoutKind::PageFirst && L.kind != LayoutKind::PageFirstDirect)
    return Status::Error(ErrCode::Layout, "unknown layout kind");
  // Products of u32 dims: check in 128-bit to reject overflow.
  const unsigned __int128 pb = (unsigned __int128)L.kv * L.layers * L.page_size * L.heads * L.head_dim * L.dtype_size;
  if (pb >= ((unsigned __int128)1 << 40))
    return Status::Error(ErrCode::Layout, "page of " + describe_layout(L) + " would exceed 2^40 bytes");
  return {};
}

Status validate_pool(const Layout& L, uint64_t pages) {
  Status s = validate_layout(L);
  if (!s.ok()) return s;
  if (pages == 0) return Status::Error(ErrCode::Layout, "pool must have at least one page (zero-sized pool)");
  if (pages >= (uint64_t(1) << 32)) return Status::Error(ErrCode::Range, "pool pages must be < 2^32");
  const unsigned __int128 bytes = (unsigned __int128)pages * L.page_bytes();
  if (bytes >= ((unsigned __int128)1 << 50)) return Status::Error(ErrCode::Range, "pool would exceed 2^50 bytes");
  return {};
}

std::string dims_mismatch(const Layout& a, const Layout& b) {
  std::string out;
  auto f = [&](const char* n, uint32_t x, uint32_t y) {
    if (x != y) out += std::string(out.empty() ? "" : ", ") + n + " " + std::to_string(x) + " vs " + std::to_string(y);
  };
  f("pageSize", a.page_size, b.page_size);
  f("layers", a.layers, b.layers);
  f("kv", a.kv, b.kv);
  f("heads", a.heads, b.heads);
  f("headDim", a.head_dim, b.head_dim);
  f("dtypeSize", a.dtype_size, b.dtype_size);
  return out;
}

uint64_t CopyPlan::coalesced_pages() const {
  uint64_t n = 0;
  for (auto& r : runs) n += r.count;
  return n;
}

Status check_pages(const uint32_t* idx, size_t n, uint64_t pages, const char* what) {
  for (size_t i = 0; i < n; ++i) {
    if (idx[i] >= pages) {
      return Status::Error(ErrCode::Range, std::string(what) + "[" + std::to_string(i) +
                                               "] = " + std::to_string(idx[i]) + " is past the pool (" +
                                               std::to_string(pages) + " pages)");
    }
  }
  return {};
}

// First duplicate value in idx, with both positions; false when none.
static bool find_duplicate(const uint32_t* idx, size_t n, uint32_t* value, size_t* first, size_t* second) {
  std::vector<uint64_t> keyed(n);
  for (size_t i = 0; i < n; ++i) keyed[i] = (uint64_t(idx[i]) << 32) | i;
  std::sort(keyed.begin(), keyed.end());
  for (size_t i = 1; i < n; ++i) {
    if ((keyed[i] >> 32) == (keyed[i - 1] >> 32)) {
      *value = uint32_t(keyed[i] >> 32);
      *first = size_t(keyed[i - 1] & 0xffffffffu);
      *second = size_t(keyed[i] & 0xffffffffu);
      return true;
    }
  }
  return false;
}

Status plan_copy(const Layout& src, uint64_t src_pages, const Layout& dst, uint64_t dst_pages, const uint32_t* src_idx,
                 size_t n_src, const uint32_t* dst_idx, size_t n_dst, bool same_pool, const PlanOptions& opt,
                 CopyPlan* out) {
  *out = CopyPlan{};
  if (!src.same_dims(dst)) {
    return Status::Error(ErrCode::Layout, "mismatched layouts: " + dims_mismatch(src, dst) + " (src " +
                                              describe_layout(src) + ", dst " + describe_layout(dst) + ")");
  }
  if (n_src != n_dst) {
    return Status::Error(ErrCode::Arg, "srcPages and dstPages differ in length (" + std::to_string(n_src) + " vs " +
                                           std::to_string(n_dst) + ")");
  }
  Status s = check_pages(src_idx, n_src, src_pages, "srcPages");
  if (!s.ok()) return s;
  s = check_pages(dst_idx, n_dst, dst_pages, "dstPages");
  if (!s.ok()) return s;
  uint32_t v;
  size_t a, b;
  if (find_duplicate(dst_idx, n_dst, &v, &a, &b)) {
    return Status::Error(ErrCode::Duplicate, "dstPages has page " + std::to_string(v) + " twice (at " +
                                                 std::to_string(a) + " and " + std::to_string(b) +
                                                 "): the result would depend on copy order");
  }
  if (same_pool && n_src) {
    std::vector<uint32_t> ss(src_idx, src_idx + n_src), dd(dst_idx, dst_idx + n_dst);
    std::sort(ss.begin(), ss.end());
    std::sort(dd.begin(), dd.end());
    std::vector<uint32_t> both;
    std::set_intersection(ss.begin(), ss.end(), dd.begin(), dd.end(), std::back_inserter(both));
    if (!both.empty()) {
      return Status::Error(ErrCode::Duplicate, "copy within one pool reads and writes page " + std::to_string(both[0]) +
                                                   ": source and destination pages must be disjoint");
    }
  }
  out->gran = granularity(src, dst);
  out->pages = n_src;
  out->bytes = uint64_t(n_src) * src.page_bytes();
  const bool can_coalesce = out->gran == Gran::Native && opt.coalesce_min_pages > 0;
  size_t i = 0;
  while (i < n_src) {
    size_t j = i + 1;
    if (can_coalesce) {
      while (j < n_src && src_idx[j] == src_idx[j - 1] + 1 && dst_idx[j] == dst_idx[j - 1] + 1) ++j;
    }
    if (can_coalesce && j - i >= opt.coalesce_min_pages) {
      out->runs.push_back({src_idx[i], dst_idx[i], uint32_t(j - i)});
    } else {
      for (size_t k = i; k < j; ++k) {
        out->kern_src.push_back(src_idx[k]);
        out->kern_dst.push_back(dst_idx[k]);
      }
    }
    i = j;
  }
  return {};
}

void cpu_execute(const CopyPlan& plan, const uint8_t* src, const Layout& sl, uint64_t src_pages, uint8_t* dst,
                 const Layout& dl, uint64_t dst_pages) {
  for (const Run& r : plan.runs) {
    const RunGeom g = run_geom(sl, src_pages, dst_pages, r.src_page, r.dst_page, r.count);
    for (uint64_t row = 0; row < g.rows; ++row) {
      std::memcpy(dst + g.dst_off + row * g.dst_pitch, src + g.src_off + row * g.src_pitch, g.width);
    }
  }
  if (plan.kern_src.empty()) return;
  const CopyArgs a =
      kernel_args(plan, src, sl, src_pages, dst, dl, dst_pages, plan.kern_src.data(), plan.kern_dst.data());
  const uint64_t items = a.items();
  for (uint64_t w = 0; w < items; ++w) {
    const uint8_t* s;
    uint8_t* d;
    a.item(w, &s, &d);
    std::memcpy(d, s, a.chunk_bytes);
  }
}

void cpu_digests(const Layout& L, const uint8_t* base, uint64_t pages, const uint32_t* idx, size_t n, uint8_t* out) {
  for (size_t i = 0; i < n; ++i) {
    Sha256 h;
    feed_page(L, base, pages, idx[i], h);
    h.final(out + 32 * i);
  }
}

void cpu_digests_portable(const Layout& L, const uint8_t* base, uint64_t pages, const uint32_t* idx, size_t n,
                          uint8_t* out) {
  for (size_t i = 0; i < n; ++i) page_digest_stream(L, base, pages, idx[i], out + 32 * i);
}

void cpu_fill(uint8_t* base, uint64_t bytes, uint64_t seed) {
  const uint64_t words = bytes / 8;
  for (uint64_t w = 0; w < words; ++w) {
    const uint64_t v = fill_word(seed, w);
    std::memcpy(base + 8 * w, &v, 8);  // little-endian host
  }
  if (bytes % 8) {
    const uint64_t v = fill_word(seed, words);
    for (uint64_t k = 0; k < bytes % 8; ++k) base[8 * words + k] = uint8_t(v >> (8 * k));
  }
}

double cpu_memcpy_baseline(uint64_t bytes, uint32_t iters) {
  if (bytes == 0) return 0;
  std::unique_ptr<uint8_t[]> a(new uint8_t[bytes]), b(new uint8_t[bytes]);
  std::memset(a.get(), 1, bytes);
  std::memset(b.get(), 0, bytes);
  double best = 1e300;
  for (uint32_t i = 0; i <= (iters ? iters : 1); ++i) {  // iteration 0 warms up, as on CUDA
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.get(), a.get(), bytes);
    const auto t1 = std::chrono::steady_clock::now();
    if (i > 0) best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

}  // namespace copy
}  // namespace kv

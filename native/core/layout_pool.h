// KV page-pool layouts matching SGLang HiCache's host pools (sglang 0.5.23,
// srt/mem_cache/pool_host/mha.py MHATokenToKVPoolHost.init_kv_buffer), and the index arithmetic
// shared by the CUDA copy kernels and their CPU twin (KV_HD: one copy of the code for both).
//
// A pool holds `P` pages of `page_size` tokens; `size = P * page_size` tokens. Per token and
// layer, one K (and one V when kv == 2) item of token_bytes = heads * head_dim * dtype_size:
//   layer_first       dims (kv, layers, size, heads, head_dim)
//   page_first        dims (kv, size, layers, heads, head_dim)
//   page_first_direct dims (kv, P, layers, page_size, heads, head_dim)
// (kv == 1 covers MLA pools, which store one latent item per token and layer.)
//
// "Canonical page order" is (kv, layer, token, head, dim): the order of SGLang's flat data page
// for layer_first. Page digests hash a page in canonical order, so a page has one digest whatever
// layout holds it, and a layer_first -> page_first round trip can be checked by digest.
#pragma once
#include <cstdint>

#include "hd.h"

namespace kv {
namespace copy {

enum class LayoutKind : uint32_t { LayerFirst = 0, PageFirst = 1, PageFirstDirect = 2 };

struct Layout {
  LayoutKind kind = LayoutKind::LayerFirst;
  uint32_t page_size = 0;   // tokens per page
  uint32_t layers = 0;
  uint32_t kv = 2;          // 2: K and V; 1: one item per token and layer (MLA)
  uint32_t heads = 0;       // KV heads on this rank
  uint32_t head_dim = 0;
  uint32_t dtype_size = 0;  // bytes per element

  KV_HD uint64_t token_bytes() const { return uint64_t(heads) * head_dim * dtype_size; }
  // Token items in a page: (kv, layer, token) triples, canonical index u = (c*layers + l)*ps + t.
  KV_HD uint64_t units_per_page() const { return uint64_t(kv) * layers * page_size; }
  KV_HD uint64_t page_bytes() const { return units_per_page() * token_bytes(); }
  // Native segments: the largest pieces of a page that are contiguous in this layout.
  KV_HD uint32_t segments() const { return kind == LayoutKind::LayerFirst ? kv * layers : kv; }
  KV_HD uint64_t segment_bytes() const { return page_bytes() / segments(); }
  // Whether the native segments, in order, are the page in canonical order.
  KV_HD bool segments_canonical() const { return kind != LayoutKind::PageFirst; }
  // Same model dims (a copy between two pools needs these equal; the kind may differ).
  KV_HD bool same_dims(const Layout& o) const {
    return page_size == o.page_size && layers == o.layers && kv == o.kv && heads == o.heads && head_dim == o.head_dim &&
           dtype_size == o.dtype_size;
  }
};

// Byte offset of token item u (canonical index) of page p in a pool of `pages` pages.
KV_HD KV_INLINE uint64_t unit_offset(const Layout& L, uint64_t pages, uint64_t p, uint64_t u) {
  const uint64_t ps = L.page_size;
  const uint64_t t = u % ps, cl = u / ps, l = cl % L.layers, c = cl / L.layers;
  const uint64_t tb = L.token_bytes();
  switch (L.kind) {
    case LayoutKind::LayerFirst:
      return ((c * L.layers + l) * pages * ps + p * ps + t) * tb;
    case LayoutKind::PageFirst:
      return (((c * pages + p) * ps + t) * L.layers + l) * tb;
    default:
      return (((c * pages + p) * L.layers + l) * ps + t) * tb;  // PageFirstDirect
  }
}

// Byte offset of native segment s of page p.
KV_HD KV_INLINE uint64_t segment_offset(const Layout& L, uint64_t pages, uint64_t p, uint64_t s) {
  return (s * pages + p) * L.segment_bytes();
}

// Granularity of a copy between two layouts with the same dims:
//   Native: same kind, native segments map one to one;
//   Row:    both kinds keep a (kv, layer) row of page_size tokens contiguous (layer_first <->
//           page_first_direct), rows in canonical order;
//   Token:  anything else (page_first <-> the others): one token item at a time.
enum class Gran : uint32_t { Native = 0, Row = 1, Token = 2 };

KV_HD KV_INLINE Gran granularity(const Layout& a, const Layout& b) {
  if (a.kind == b.kind) return Gran::Native;
  if (a.segments_canonical() && b.segments_canonical()) return Gran::Row;
  return Gran::Token;
}
KV_HD KV_INLINE uint64_t chunks_per_page(const Layout& L, Gran g) {
  return g == Gran::Native ? L.segments() : g == Gran::Row ? uint64_t(L.kv) * L.layers : L.units_per_page();
}
KV_HD KV_INLINE uint64_t chunk_bytes(const Layout& L, Gran g) {
  return g == Gran::Native ? L.segment_bytes()
         : g == Gran::Row  ? uint64_t(L.page_size) * L.token_bytes()
                           : L.token_bytes();
}
KV_HD KV_INLINE uint64_t chunk_offset(const Layout& L, uint64_t pages, uint64_t p, uint64_t c, Gran g) {
  if (g == Gran::Native) return segment_offset(L, pages, p, c);
  if (g == Gran::Row) return unit_offset(L, pages, p, c * L.page_size);
  return unit_offset(L, pages, p, c);
}
// The granularity in which a page of L, chunk by chunk, is read in canonical order (digests).
KV_HD KV_INLINE Gran canonical_gran(const Layout& L) {
  return L.segments_canonical() ? Gran::Native : Gran::Token;
}

// One batched page copy as the kernel and the CPU twin both see it: `n` (src page, dst page)
// pairs, each page split into chunks of `chunk_bytes`; work item i*cpp + c copies chunk c of pair i.
struct CopyArgs {
  const uint8_t* src;
  uint8_t* dst;
  Layout src_layout, dst_layout;
  uint64_t src_pages, dst_pages;  // pool sizes in pages
  const uint32_t* src_idx;        // n page indices (readable where the copy runs)
  const uint32_t* dst_idx;
  uint64_t n;
  Gran gran;
  uint64_t cpp;          // chunks per page
  uint64_t chunk_bytes;

  KV_HD uint64_t items() const { return n * cpp; }
  KV_HD void item(uint64_t w, const uint8_t** s, uint8_t** d) const {
    const uint64_t i = w / cpp, c = w % cpp;
    *s = src + chunk_offset(src_layout, src_pages, src_idx[i], c, gran);
    *d = dst + chunk_offset(dst_layout, dst_pages, dst_idx[i], c, gran);
  }
};

// A coalesced run: `count` consecutive pages from src_page to dst_page, same layout kind. It is
// `rows` copies of `width` bytes, row r at src_base + r*src_pitch -> dst_base + r*dst_pitch
// (one cudaMemcpy2DAsync on the GPU, `rows` memcpy calls on the CPU).
struct RunGeom {
  uint64_t src_off, dst_off, width, rows, src_pitch, dst_pitch;
};
KV_HD KV_INLINE RunGeom run_geom(const Layout& L, uint64_t src_pages, uint64_t dst_pages, uint64_t src_page,
                                 uint64_t dst_page, uint64_t count) {
  RunGeom g;
  const uint64_t seg = L.segment_bytes();
  g.src_off = segment_offset(L, src_pages, src_page, 0);
  g.dst_off = segment_offset(L, dst_pages, dst_page, 0);
  g.width = count * seg;
  g.rows = L.segments();
  g.src_pitch = src_pages * seg;
  g.dst_pitch = dst_pages * seg;
  return g;
}

// Deterministic pool contents for tests and benches: byte o of a pool filled with `seed` is byte
// (o % 8) (little-endian) of fill_word(seed, o / 8). The GPU fill kernel and the CPU fill agree.
KV_HD KV_INLINE uint64_t fill_word(uint64_t seed, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + index + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace copy
}  // namespace kv

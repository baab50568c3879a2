// Layout and index arithmetic of the page pools (layout_pool.h), checked against SGLang's
// tensor dims written out as plain strides, and the copy planner's checks.
#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "check.h"
#include "copy_digest.h"
#include "copy_plan.h"
#include "layout_fixtures.h"
#include "sha256.h"

using namespace kv::copy;

namespace {

constexpr auto make = kvtest::make_layout;

// Byte offset of element (c, layer, token, head 0, dim 0) from SGLang's dims for each layout
// (pool_host/mha.py init_kv_buffer), row-major strides.
uint64_t sglang_offset(const Layout& L, uint64_t pages, uint64_t c, uint64_t l, uint64_t token) {
  const uint64_t item = uint64_t(L.heads) * L.head_dim * L.dtype_size;
  const uint64_t size = pages * L.page_size;
  switch (L.kind) {
    case LayoutKind::LayerFirst:  // (kv, layers, size, heads, head_dim)
      return ((c * L.layers + l) * size + token) * item;
    case LayoutKind::PageFirst:  // (kv, size, layers, heads, head_dim)
      return ((c * size + token) * L.layers + l) * item;
    default: {  // (kv, page_num, layers, page_size, heads, head_dim)
      const uint64_t p = token / L.page_size, t = token % L.page_size;
      return (((c * pages + p) * L.layers + l) * L.page_size + t) * item;
    }
  }
}

const LayoutKind kKinds[] = {LayoutKind::LayerFirst, LayoutKind::PageFirst, LayoutKind::PageFirstDirect};

}  // namespace

TEST_CASE(copy_layout, unit_offsets_match_sglang_dims) {
  for (LayoutKind k : kKinds) {
    for (uint32_t kvn : {1u, 2u}) {
      const Layout L = make(k, 3, 5, kvn, 2, 3, 2);
      const uint64_t pages = 7;
      for (uint64_t p = 0; p < pages; ++p) {
        for (uint64_t c = 0; c < kvn; ++c) {
          for (uint64_t l = 0; l < L.layers; ++l) {
            for (uint64_t t = 0; t < L.page_size; ++t) {
              const uint64_t u = (c * L.layers + l) * L.page_size + t;
              CHECK_EQ(unit_offset(L, pages, p, u), sglang_offset(L, pages, c, l, p * L.page_size + t));
            }
          }
        }
      }
    }
  }
}

TEST_CASE(copy_layout, chunks_tile_each_page_exactly_once) {
  for (LayoutKind a : kKinds) {
    for (LayoutKind b : kKinds) {
      const Layout L = make(a, 4, 3, 2, 1, 5, 1);
      const Layout M = make(b, 4, 3, 2, 1, 5, 1);
      const Gran g = granularity(L, M);
      const uint64_t pages = 5;
      std::vector<int> hits(pages * L.page_bytes(), 0);
      for (uint64_t p = 0; p < pages; ++p) {
        for (uint64_t c = 0; c < chunks_per_page(L, g); ++c) {
          const uint64_t off = chunk_offset(L, pages, p, c, g);
          for (uint64_t k = 0; k < chunk_bytes(L, g); ++k) hits[off + k]++;
        }
      }
      bool all_once = true;
      for (int h : hits) all_once = all_once && h == 1;
      CHECK(all_once);
      CHECK_EQ(chunks_per_page(L, g) * chunk_bytes(L, g), L.page_bytes());
      CHECK(chunks_per_page(L, g) == chunks_per_page(M, g));
      CHECK(chunk_bytes(L, g) == chunk_bytes(M, g));
    }
  }
}

TEST_CASE(copy_layout, chunk_c_is_the_same_canonical_bytes_in_both_layouts) {
  // Chunk c of a page, under the pair's granularity, starts at the same canonical unit in both.
  for (LayoutKind a : kKinds) {
    for (LayoutKind b : kKinds) {
      const Layout L = make(a, 3, 2, 2, 2, 2, 2), M = make(b, 3, 2, 2, 2, 2, 2);
      const Gran g = granularity(L, M);
      if (g == Gran::Native && a == LayoutKind::PageFirst) continue;  // native PF chunks are not canonical
      const uint64_t units_per_chunk = chunk_bytes(L, g) / L.token_bytes();
      for (uint64_t c = 0; c < chunks_per_page(L, g); ++c) {
        CHECK_EQ(chunk_offset(L, 4, 1, c, g), unit_offset(L, 4, 1, c * units_per_chunk));
        CHECK_EQ(chunk_offset(M, 9, 2, c, g), unit_offset(M, 9, 2, c * units_per_chunk));
      }
    }
  }
}

TEST_CASE(copy_layout, run_geometry_equals_page_by_page) {
  for (LayoutKind k : kKinds) {
    const Layout L = make(k, 2, 3, 2, 1, 4, 2);
    const uint64_t P = 6, Q = 9;
    const RunGeom g = run_geom(L, P, Q, 2, 5, 3);
    CHECK_EQ(g.rows, uint64_t(L.segments()));
    for (uint64_t i = 0; i < 3; ++i) {
      for (uint64_t s = 0; s < L.segments(); ++s) {
        CHECK_EQ(g.src_off + s * g.src_pitch + i * L.segment_bytes(), segment_offset(L, P, 2 + i, s));
        CHECK_EQ(g.dst_off + s * g.dst_pitch + i * L.segment_bytes(), segment_offset(L, Q, 5 + i, s));
      }
    }
  }
}

TEST_CASE(copy_layout, zero_sized_and_bad_layouts_are_rejected) {
  const Layout ok = make(LayoutKind::PageFirst, 16, 2, 2, 4, 8, 2);
  CHECK(validate_layout(ok).ok());
  CHECK(validate_pool(ok, 1).ok());
  CHECK(validate_pool(ok, 0).code == ErrCode::Layout);
  for (int f = 0; f < 5; ++f) {
    Layout z = ok;
    uint32_t* fields[] = {&z.page_size, &z.layers, &z.heads, &z.head_dim, &z.dtype_size};
    *fields[f] = 0;
    const Status s = validate_layout(z);
    CHECK(s.code == ErrCode::Layout);
    CHECK(s.message.find("zero-sized") != std::string::npos);
  }
  Layout k3 = ok;
  k3.kv = 3;
  CHECK(validate_layout(k3).code == ErrCode::Layout);
  Layout huge = make(LayoutKind::LayerFirst, 1u << 20, 1u << 10, 2, 1u << 10, 1u << 10, 2);
  CHECK(validate_layout(huge).code == ErrCode::Layout);
  CHECK(validate_pool(ok, uint64_t(1) << 33).code == ErrCode::Range);
}

TEST_CASE(copy_layout, plan_coalesces_runs_and_sends_the_rest_to_the_kernel) {
  const Layout L = make(LayoutKind::LayerFirst, 4, 2, 2, 1, 8, 2);
  const uint32_t s[] = {0, 1, 2, 7, 9, 10, 4};
  const uint32_t d[] = {3, 4, 5, 0, 1, 8, 2};
  CopyPlan plan;
  CHECK(plan_copy(L, 16, L, 16, s, 7, d, 7, false, {}, &plan).ok());
  CHECK_EQ(plan.runs.size(), size_t(1));  // 0,1,2 -> 3,4,5 ; 9,10 -> 1,8 is not a dst run
  CHECK_EQ(plan.runs[0].count, 3u);
  CHECK_EQ(plan.kern_src.size(), size_t(4));
  CHECK_EQ(plan.bytes, 7 * L.page_bytes());
  CHECK(plan_copy(L, 16, L, 16, s, 7, d, 7, false, PlanOptions{0}, &plan).ok());
  CHECK(plan.runs.empty());
  CHECK_EQ(plan.kern_src.size(), size_t(7));
  // Cross-kind copies always go through the kernel.
  Layout M = L;
  M.kind = LayoutKind::PageFirst;
  CHECK(plan_copy(L, 16, M, 16, s, 7, d, 7, false, {}, &plan).ok());
  CHECK(plan.runs.empty());
  CHECK(plan.gran == Gran::Token);
}

TEST_CASE(copy_layout, plan_rejects_bad_batches) {
  const Layout L = make(LayoutKind::PageFirst, 4, 2, 2, 1, 8, 2);
  CopyPlan plan;
  const uint32_t s[] = {0, 1, 2};
  const uint32_t past[] = {0, 1, 16};
  const uint32_t dup[] = {5, 6, 5};
  const uint32_t overlap[] = {2, 8, 9};
  Status st = plan_copy(L, 16, L, 16, s, 3, past, 3, false, {}, &plan);
  CHECK(st.code == ErrCode::Range);
  CHECK(st.message.find("dstPages[2] = 16") != std::string::npos);
  st = plan_copy(L, 16, L, 16, past, 3, s, 3, false, {}, &plan);
  CHECK(st.code == ErrCode::Range);
  st = plan_copy(L, 16, L, 16, s, 3, dup, 3, false, {}, &plan);
  CHECK(st.code == ErrCode::Duplicate);
  CHECK(st.message.find("page 5 twice (at 0 and 2)") != std::string::npos);
  CHECK(plan_copy(L, 16, L, 16, dup, 3, s, 3, false, {}, &plan).ok());  // duplicate sources are fine
  st = plan_copy(L, 16, L, 16, s, 3, overlap, 3, true, {}, &plan);
  CHECK(st.code == ErrCode::Duplicate);
  CHECK(plan_copy(L, 16, L, 16, s, 3, overlap, 3, false, {}, &plan).ok());
  st = plan_copy(L, 16, L, 16, s, 3, s, 2, false, {}, &plan);
  CHECK(st.code == ErrCode::Arg);
  Layout M = L;
  M.head_dim = 16;
  st = plan_copy(L, 16, M, 16, s, 3, s, 3, false, {}, &plan);
  CHECK(st.code == ErrCode::Layout);
  CHECK(st.message.find("headDim 8 vs 16") != std::string::npos);
  CHECK(plan_copy(L, 16, L, 16, nullptr, 0, nullptr, 0, false, {}, &plan).ok());
  CHECK_EQ(plan.pages, uint64_t(0));
}

TEST_CASE(copy_layout, streaming_sha256_matches_the_core) {
  std::vector<uint8_t> data(1000);
  cpu_fill(data.data(), data.size(), 42);
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 999, 1000}) {
    for (size_t split : {1, 7, 64, 100}) {
      Sha256Stream st;
      st.init();
      for (size_t off = 0; off < len; off += split) st.update(data.data() + off, std::min(split, len - off));
      uint8_t a[32], b[32];
      st.final(a);
      kv::sha256(data.data(), len, b);
      CHECK(std::memcmp(a, b, 32) == 0);
    }
  }
}

TEST_CASE(copy_layout, fill_is_deterministic_and_seeded) {
  std::vector<uint8_t> a(77), b(77), c(77);
  cpu_fill(a.data(), a.size(), 1);
  cpu_fill(b.data(), b.size(), 1);
  cpu_fill(c.data(), c.size(), 2);
  CHECK(a == b);
  CHECK(a != c);
  const uint64_t w = fill_word(1, 9);
  CHECK_EQ(a[72], uint8_t(w));  // tail bytes come from word 9, little-endian
  CHECK_EQ(a[76], uint8_t(w >> 32));
}

// The CUDA page copies against the CPU twin: every layout pair, every direction (host -> device,
// device -> host, device -> device, pinned host -> pinned host), through the kernel alone and with
// coalesced runs, byte for byte; the GPU page digests and fill against the CPU's.
#include <algorithm>
#include <random>
#include <vector>

#include "check.h"
#include "copy_plan.h"
#include "gpu_pool.h"
#include "layout_fixtures.h"

using namespace kv::copy;
using kvgpu::Buffer;

namespace {

constexpr auto make = kvtest::make_layout;
const LayoutKind kKinds[] = {LayoutKind::LayerFirst, LayoutKind::PageFirst, LayoutKind::PageFirstDirect};
struct Direction {
  const char* name;
  bool src_host, dst_host;
};
const Direction kDirections[] = {
    {"h2d", true, false}, {"d2h", false, true}, {"d2d", false, false}, {"h2h", true, true}};

// A batch with a run of consecutive pages at the front and scattered pages after it.
void make_batch(std::mt19937& rng, uint64_t sp, uint64_t dp, std::vector<uint32_t>* s, std::vector<uint32_t>* d) {
  std::vector<uint32_t> perm(dp);
  for (uint32_t i = 0; i < dp; ++i) perm[i] = i;
  std::shuffle(perm.begin() + 3, perm.end(), rng);
  const size_t n = 3 + rng() % (std::min(sp, dp) - 2);
  s->assign(n, 0);
  d->assign(perm.begin(), perm.begin() + n);
  for (size_t i = 0; i < n; ++i) (*s)[i] = i < 3 ? uint32_t(i) : uint32_t(rng() % sp);
}

}  // namespace

TEST_CASE(cuda_copy, every_layout_pair_and_direction_matches_the_cpu_twin) {
  std::mt19937 rng(11);
  int cases = 0;
  // Token sizes that take each kernel width: 16-byte vectors, 4-byte words, single bytes.
  const uint32_t dims[][3] = {{2, 8, 2}, {3, 2, 2}, {1, 5, 1}};  // heads, head_dim, dtype bytes
  for (LayoutKind a : kKinds) {
    for (LayoutKind b : kKinds) {
      for (const auto& dm : dims) {
        const uint32_t ps = 1 + rng() % 4, layers = 1 + rng() % 3, kvn = 1 + rng() % 2;
        const Layout sl = make(a, ps, layers, kvn, dm[0], dm[1], dm[2]),
                     dl = make(b, ps, layers, kvn, dm[0], dm[1], dm[2]);
        const uint64_t sp = 5 + rng() % 9, dp = 5 + rng() % 9;
        std::vector<uint8_t> src(sp * sl.page_bytes()), dst(dp * dl.page_bytes());
        cpu_fill(src.data(), src.size(), rng());
        cpu_fill(dst.data(), dst.size(), rng());
        std::vector<uint32_t> s, d;
        make_batch(rng, sp, dp, &s, &d);
        for (const Direction& dir : kDirections) {
          for (uint32_t min_run : {0u, 2u}) {
            CopyPlan plan;
            CHECK(plan_copy(sl, sp, dl, dp, s.data(), s.size(), d.data(), d.size(), false, PlanOptions{min_run}, &plan)
                      .ok());
            std::vector<uint8_t> want = dst;
            cpu_execute(plan, src.data(), sl, sp, want.data(), dl, dp);
            Buffer gs(0, dir.src_host, src.size()), gd(0, dir.dst_host, dst.size());
            CHECK(gs.ok() && gd.ok());
            if (!gs.ok() || !gd.ok()) return;
            CHECK(gs.upload(src));
            CHECK(gd.upload(dst));
            const Status st = cuda::execute(0, plan, gs.p, sl, sp, gd.p, dl, dp);
            if (!st.ok()) std::fprintf(stderr, "%s: %s\n", dir.name, st.message.c_str());
            CHECK(st.ok());
            CHECK(gd.download() == want);
            CHECK(gs.download() == src);  // the source is left as it was
            ++cases;
          }
        }
      }
    }
  }
  CHECK_EQ(cases, 9 * 3 * 4 * 2);
}

TEST_CASE(cuda_copy, page_digests_on_the_gpu_match_the_cpu) {
  std::mt19937 rng(12);
  for (LayoutKind k : kKinds) {
    for (uint32_t kvn : {1u, 2u}) {
      const Layout L = make(k, 3, 4, kvn, 2, 7, 2);
      const uint64_t pages = 9;
      std::vector<uint8_t> pool(pages * L.page_bytes());
      cpu_fill(pool.data(), pool.size(), rng());
      const std::vector<uint32_t> idx = {8, 0, 3, 3, 5};
      std::vector<uint8_t> want(32 * idx.size()), got(32 * idx.size(), 0);
      cpu_digests(L, pool.data(), pages, idx.data(), idx.size(), want.data());
      Buffer g(0, false, pool.size());
      CHECK(g.ok() && g.upload(pool));
      CHECK(cuda::digests(0, L, g.p, pages, idx.data(), idx.size(), got.data()).ok());
      CHECK(got == want);
    }
  }
}

TEST_CASE(cuda_copy, fill_on_the_gpu_matches_the_cpu_fill) {
  for (uint64_t bytes : {uint64_t(1), uint64_t(13), uint64_t(4096), uint64_t(1) << 20 | 5}) {
    std::vector<uint8_t> want(bytes);
    cpu_fill(want.data(), bytes, 42 + bytes);
    Buffer g(0, false, bytes);
    CHECK(g.ok() && cuda::fill(0, g.p, bytes, 42 + bytes).ok());
    CHECK(g.download() == want);
  }
}

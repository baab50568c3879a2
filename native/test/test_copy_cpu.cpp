// The CPU twin of the page copies: random pools, every layout pair, odd page counts and sizes,
// checked byte for byte against a naive per-token reference and by page digest.
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "copy_digest.h"
#include "copy_plan.h"
#include "layout_fixtures.h"
#include "sha256.h"

using namespace kv::copy;

namespace {

constexpr auto make = kvtest::make_layout;

const LayoutKind kKinds[] = {LayoutKind::LayerFirst, LayoutKind::PageFirst, LayoutKind::PageFirstDirect};

// Naive reference: token item by token item.
void reference_copy(const Layout& sl, const uint8_t* src, uint64_t sp, const Layout& dl, uint8_t* dst, uint64_t dp,
                    const std::vector<uint32_t>& s, const std::vector<uint32_t>& d) {
  for (size_t i = 0; i < s.size(); ++i) {
    for (uint64_t u = 0; u < sl.units_per_page(); ++u) {
      std::memcpy(dst + unit_offset(dl, dp, d[i], u), src + unit_offset(sl, sp, s[i], u), sl.token_bytes());
    }
  }
}

}  // namespace

TEST_CASE(copy_cpu, random_batches_match_the_reference_for_every_layout_pair) {
  std::mt19937 rng(7);
  int cases = 0;
  for (LayoutKind a : kKinds) {
    for (LayoutKind b : kKinds) {
      for (int trial = 0; trial < 6; ++trial) {
        const uint32_t ps = 1 + rng() % 5, layers = 1 + rng() % 4, kvn = 1 + rng() % 2, heads = 1 + rng() % 3,
                       hd = 1 + rng() % 9, dt = (trial % 3 == 0) ? 1 : (trial % 3 == 1 ? 2 : 4);
        const Layout sl = make(a, ps, layers, kvn, heads, hd, dt), dl = make(b, ps, layers, kvn, heads, hd, dt);
        const uint64_t sp = 3 + rng() % 17, dp = 3 + rng() % 17;
        std::vector<uint8_t> src(sp * sl.page_bytes()), dst(dp * dl.page_bytes());
        cpu_fill(src.data(), src.size(), rng());
        cpu_fill(dst.data(), dst.size(), rng());
        std::vector<uint8_t> want = dst;
        // An odd-sized batch with a consecutive run and scattered pages, no duplicate targets.
        std::vector<uint32_t> perm(dp);
        for (uint32_t i = 0; i < dp; ++i) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), rng);
        const size_t n = 1 + rng() % std::min<uint64_t>(sp, dp);
        std::vector<uint32_t> s(n), d(perm.begin(), perm.begin() + n);
        for (size_t i = 0; i < n; ++i) s[i] = rng() % sp;
        if (n >= 3 && sp >= 3 && dp >= 3) {  // make a run at the front
          s[0] = 0, s[1] = 1, s[2] = 2;
          std::vector<uint32_t> rest;
          for (uint32_t x = 0; x < dp; ++x)
            if (x > 2) rest.push_back(x);
          std::shuffle(rest.begin(), rest.end(), rng);
          d.assign({0, 1, 2});
          for (size_t i = 3; i < n; ++i) d.push_back(rest[i - 3]);
        }
        for (uint32_t min_run : {0u, 2u}) {
          std::vector<uint8_t> got = dst;
          CopyPlan plan;
          Status st = plan_copy(sl, sp, dl, dp, s.data(), n, d.data(), n, false, PlanOptions{min_run}, &plan);
          CHECK(st.ok());
          cpu_execute(plan, src.data(), sl, sp, got.data(), dl, dp);
          std::vector<uint8_t> ref = want;
          reference_copy(sl, src.data(), sp, dl, ref.data(), dp, s, d);
          CHECK(got == ref);
          // Digests: same page, same digest, whichever layout holds it.
          std::vector<uint8_t> ds(32 * n), dd(32 * n), dpo(32 * n);
          cpu_digests(sl, src.data(), sp, s.data(), n, ds.data());
          cpu_digests(dl, got.data(), dp, d.data(), n, dd.data());
          cpu_digests_portable(dl, got.data(), dp, d.data(), n, dpo.data());
          CHECK(ds == dd);
          CHECK(dd == dpo);
          ++cases;
        }
      }
    }
  }
  CHECK_EQ(cases, 108);
}

TEST_CASE(copy_cpu, round_trip_layer_first_to_page_first_and_back) {
  const Layout dev = make(LayoutKind::LayerFirst, 3, 3, 2, 2, 5, 2);
  Layout host = dev;
  host.kind = LayoutKind::PageFirst;
  const uint64_t P = 11, Q = 7;
  std::vector<uint8_t> d(P * dev.page_bytes()), h(Q * host.page_bytes()), back(P * dev.page_bytes(), 0);
  cpu_fill(d.data(), d.size(), 99);
  const std::vector<uint32_t> pages = {10, 3, 4, 5, 0}, slots = {6, 0, 1, 2, 3}, out = {0, 1, 2, 3, 4};
  CopyPlan plan;
  CHECK(plan_copy(dev, P, host, Q, pages.data(), 5, slots.data(), 5, false, {}, &plan).ok());
  cpu_execute(plan, d.data(), dev, P, h.data(), host, Q);
  CHECK(plan_copy(host, Q, dev, P, slots.data(), 5, out.data(), 5, false, {}, &plan).ok());
  cpu_execute(plan, h.data(), host, Q, back.data(), dev, P);
  std::vector<uint8_t> a(32 * 5), b(32 * 5);
  cpu_digests(dev, d.data(), P, pages.data(), 5, a.data());
  cpu_digests(dev, back.data(), P, out.data(), 5, b.data());
  CHECK(a == b);
}

TEST_CASE(copy_cpu, digest_of_a_layer_first_page_is_sha256_of_its_flat_data_page) {
  // SGLang's get_data_page(flat=True) for layer_first is the page in canonical order.
  const Layout L = make(LayoutKind::LayerFirst, 2, 3, 2, 1, 4, 2);
  const uint64_t P = 4;
  std::vector<uint8_t> pool(P * L.page_bytes());
  cpu_fill(pool.data(), pool.size(), 5);
  std::vector<uint8_t> flat;
  const uint64_t row = uint64_t(L.page_size) * L.token_bytes();
  for (uint64_t c = 0; c < L.kv; ++c)
    for (uint64_t l = 0; l < L.layers; ++l) {
      const uint8_t* p = pool.data() + ((c * L.layers + l) * P * L.page_size + 2 * L.page_size) * L.token_bytes();
      flat.insert(flat.end(), p, p + row);
    }
  uint8_t want[32], got[32];
  kv::sha256(flat.data(), flat.size(), want);
  const uint32_t page = 2;
  cpu_digests(L, pool.data(), P, &page, 1, got);
  CHECK(std::memcmp(want, got, 32) == 0);
}

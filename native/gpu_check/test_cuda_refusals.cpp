// Bad input to the CUDA entry points is refused with a Status naming the problem, before any copy
// or launch, and nothing is written.
#include <vector>

#include "check.h"
#include "copy_cuda.h"
#include "layout_fixtures.h"

using namespace kv::copy;

TEST_CASE(cuda_refusals, devices_that_do_not_exist_are_refused) {
  const cuda::RuntimeInfo info = cuda::runtime_info();
  CHECK(info.device_count >= 1);
  for (int dev : {-1, info.device_count, 1 << 20}) {
    const Status s = cuda::check_device(dev);
    CHECK(s.code == ErrCode::Device);
    CHECK(s.message.find("does not exist") != std::string::npos);
    void* p = nullptr;
    CHECK(cuda::alloc_device(dev, 64, &p).code == ErrCode::Device);
    CHECK(p == nullptr);
    uint8_t out[32] = {0};
    const uint32_t idx = 0;
    const Layout L = kvtest::make_layout(LayoutKind::LayerFirst, 1, 1, 1, 1, 8, 1);
    CHECK(cuda::digests(dev, L, nullptr, 1, &idx, 1, out).code == ErrCode::Device);
    CHECK(out[0] == 0);
  }
}

TEST_CASE(cuda_refusals, an_impossible_allocation_is_a_status_not_a_crash) {
  void* p = nullptr;
  const Status s = cuda::alloc_device(0, uint64_t(1) << 52, &p);
  CHECK(!s.ok());
  CHECK(s.code == ErrCode::NoMemory || s.code == ErrCode::Cuda);
  CHECK(!s.cuda_name.empty());
  // The device is still usable after the refused allocation (the error was not sticky).
  CHECK(cuda::alloc_device(0, 4096, &p).ok());
  cuda::free_device(0, p);
}

TEST_CASE(cuda_refusals, a_batch_the_planner_refuses_never_reaches_the_device) {
  const Layout L = kvtest::make_layout(LayoutKind::PageFirst, 2, 2, 2, 1, 8, 2);
  const std::vector<uint32_t> src = {0, 1}, out_of_range = {0, 9}, dup = {3, 3};
  CopyPlan plan;
  CHECK(plan_copy(L, 4, L, 4, src.data(), 2, out_of_range.data(), 2, false, {}, &plan).code == ErrCode::Range);
  CHECK(plan_copy(L, 4, L, 4, src.data(), 2, dup.data(), 2, false, {}, &plan).code == ErrCode::Duplicate);
  // An empty plan launches nothing and succeeds even with null pools.
  CopyPlan empty;
  CHECK(cuda::execute(0, empty, nullptr, L, 4, nullptr, L, 4).ok());
}

// Host <-> device page copies (the plan executor of copy_cuda.cu) against cudaMemcpy of the same
// bytes as one contiguous buffer, in the same process: llama-3.1-8b pages (32 layers, 8 KV heads,
// head dim 128, bf16, K and V; 64 tokens a page), layer_first on both sides, a session of pages
// copied as one consecutive run and scattered over a pool twice its size. Prints one JSON line.
//   kvcuda_bench [tokens] [iters]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "copy_plan.h"
#include "gpu_pool.h"

using namespace kv::copy;
using kvgpu::Buffer;

namespace {

bool fail(const char* what, const Status& s) {
  if (s.ok()) return false;
  std::fprintf(stderr, "kvcuda_bench: %s: %s\n", what, s.message.c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t tokens = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8192;
  const uint32_t iters = argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 10)) : 5;
  Layout L;
  L.kind = LayoutKind::LayerFirst;
  L.page_size = 64;
  L.layers = 32;
  L.kv = 2;
  L.heads = 8;
  L.head_dim = 128;
  L.dtype_size = 2;
  const uint64_t pages = (tokens + L.page_size - 1) / L.page_size, bytes = pages * L.page_bytes();
  if (pages < 2 || iters < 1) {
    std::fprintf(stderr, "kvcuda_bench: tokens must be >= %u and iters >= 1\n", 2 * L.page_size);
    return 2;
  }
  const cuda::RuntimeInfo info = cuda::runtime_info();
  if (info.device_count < 1) {
    std::fprintf(stderr, "kvcuda_bench: no CUDA device: %s\n", info.status.message.c_str());
    return 1;
  }
  Buffer dev(0, false, 2 * bytes), host(0, true, bytes);
  if (!dev.ok() || !host.ok()) return 1;
  if (fail("fill", cuda::fill(0, dev.p, dev.bytes, 1)) || fail("fill", cuda::fill(0, host.p, host.bytes, 2))) return 1;

  std::vector<uint32_t> seq(pages), dev_scattered(2 * pages), host_scattered(pages);
  std::iota(seq.begin(), seq.end(), 0);
  std::iota(dev_scattered.begin(), dev_scattered.end(), 0);
  std::iota(host_scattered.begin(), host_scattered.end(), 0);
  std::mt19937 rng(7);
  std::shuffle(dev_scattered.begin(), dev_scattered.end(), rng);
  dev_scattered.resize(pages);
  std::shuffle(host_scattered.begin(), host_scattered.end(), rng);

  // Seconds of the best of `iters` copies (after one warm-up); infinity when a copy failed.
  auto best = [&](bool d2h, const std::vector<uint32_t>& di, const std::vector<uint32_t>& hi) {
    CopyPlan plan;
    const Status ps = d2h ? plan_copy(L, 2 * pages, L, pages, di.data(), pages, hi.data(), pages, false, {}, &plan)
                          : plan_copy(L, pages, L, 2 * pages, hi.data(), pages, di.data(), pages, false, {}, &plan);
    if (fail("plan", ps)) return std::numeric_limits<double>::infinity();
    double b = std::numeric_limits<double>::infinity();
    for (uint32_t i = 0; i <= iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const Status s = d2h ? cuda::execute(0, plan, dev.p, L, 2 * pages, host.p, L, pages)
                           : cuda::execute(0, plan, host.p, L, pages, dev.p, L, 2 * pages);
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (fail("copy", s)) return std::numeric_limits<double>::infinity();
      if (i > 0) b = std::min(b, t);
    }
    return b;
  };
  double mem[2] = {0, 0};
  if (fail("cudaMemcpy d2h", cuda::bench_memcpy(0, bytes, true, iters, &mem[0])) ||
      fail("cudaMemcpy h2d", cuda::bench_memcpy(0, bytes, false, iters, &mem[1])))
    return 1;
  const double t[2][2] = {{best(true, seq, seq), best(true, dev_scattered, host_scattered)},
                          {best(false, seq, seq), best(false, dev_scattered, host_scattered)}};
  for (auto& row : t)
    for (double x : row)
      if (!(x < std::numeric_limits<double>::infinity())) return 1;
  const auto gb = [&](double s) { return double(bytes) / s / 1e9; };
  std::string name = info.devices.empty() ? "" : info.devices[0].name;
  for (char& c : name)
    if (c == '"' || c == '\\') c = ' ';
  std::printf(
      "{\"device\":\"%s\",\"bytes\":%llu,\"pages\":%llu,\"iters\":%u,"
      "\"gbps\":{\"d2h\":{\"contiguous\":%.3f,\"scattered\":%.3f,\"memcpy\":%.3f},"
      "\"h2d\":{\"contiguous\":%.3f,\"scattered\":%.3f,\"memcpy\":%.3f}},"
      "\"ratio\":{\"d2h\":{\"contiguous\":%.3f,\"scattered\":%.3f},\"h2d\":{\"contiguous\":%.3f,\"scattered\":%.3f}}}"
      "\n",
      name.c_str(), (unsigned long long)bytes, (unsigned long long)pages, iters, gb(t[0][0]), gb(t[0][1]), gb(mem[0]),
      gb(t[1][0]), gb(t[1][1]), gb(mem[1]), mem[0] / t[0][0], mem[0] / t[0][1], mem[1] / t[1][0], mem[1] / t[1][1]);
  return 0;
}

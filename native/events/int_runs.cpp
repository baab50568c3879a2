// Run-time choice of the integer-run path (int_runs.h).
#include "int_runs.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kv::mp {
namespace {

bool cpu_has_avx512vbmi() {
#if defined(__x86_64__) && defined(__GNUC__)
  // libgcc's CPU model also checks XCR0, so a kernel that does not save the AVX-512 state counts
  // as "no".
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

bool cpu_has_avx2() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

IntRunPath best_path() {
  if (int_runs_avx512_supported()) return IntRunPath::Avx512;
  return int_runs_avx2_supported() ? IntRunPath::Avx2 : IntRunPath::Scalar;
}

IntRunPath initial_path() {
  // KVCTL_INT_RUNS=scalar|avx2 caps the path (to compare hosts and paths in benchmarks); a path
  // the CPU lacks falls back to the best one below it.
  const char* env = std::getenv("KVCTL_INT_RUNS");
  if (env && std::strcmp(env, "scalar") == 0) return IntRunPath::Scalar;
  if (env && std::strcmp(env, "avx2") == 0) return int_runs_avx2_supported() ? IntRunPath::Avx2 : IntRunPath::Scalar;
  return best_path();
}

std::atomic<IntRunPath>& active() {
  static std::atomic<IntRunPath> p{initial_path()};
  return p;
}

}  // namespace

bool int_runs_avx2_supported() {
  static const bool has = cpu_has_avx2();
  return has;
}

bool int_runs_avx512_supported() {
  static const bool has = cpu_has_avx512vbmi();
  return has;
}

IntRunPath int_run_path() {
  return active().load(std::memory_order_relaxed);
}

bool set_int_run_path(IntRunPath p) {
  if (p == IntRunPath::Avx512 && !int_runs_avx512_supported()) return false;
  if (p == IntRunPath::Avx2 && !int_runs_avx2_supported()) return false;
  active().store(p, std::memory_order_relaxed);
  return true;
}

uint32_t skip_u32_forms(const uint8_t*& p, const uint8_t* end, uint32_t n) {
  switch (int_run_path()) {
    case IntRunPath::Avx512:
      return detail::skip_u32_forms_avx512(p, end, n);
    case IntRunPath::Avx2:
      return detail::skip_u32_forms_avx2(p, end, n);
    default:
      return 0;
  }
}

uint32_t decode_u32_forms(const uint8_t*& p, const uint8_t* end, uint32_t n, uint32_t* out) {
  switch (int_run_path()) {
    case IntRunPath::Avx512:
      return detail::decode_u32_forms_avx512(p, end, n, out);
    case IntRunPath::Avx2:
      return detail::decode_u32_forms_avx2(p, end, n, out);
    default:
      return 0;
  }
}

}  // namespace kv::mp

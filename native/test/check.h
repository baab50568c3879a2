// A minimal test harness for the core (no third-party test framework to vendor): each
// test_<suite>.cpp registers cases; `kvcore_tests <suite>` runs one suite for ctest.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace kvtest {

struct Case {
  std::string suite, name;
  std::function<void()> fn;
};
std::vector<Case>& registry();
extern int failures;

struct Registrar {
  Registrar(const char* suite, const char* name, std::function<void()> fn) {
    registry().push_back({suite, name, std::move(fn)});
  }
};

}  // namespace kvtest

#define KV_CAT2(a, b) a##b
#define KV_CAT(a, b) KV_CAT2(a, b)
#define TEST_CASE(suite, name)                                                     \
  static void KV_CAT(test_, name)();                                               \
  static kvtest::Registrar KV_CAT(reg_, name)(#suite, #name, KV_CAT(test_, name)); \
  static void KV_CAT(test_, name)()

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      ++kvtest::failures;                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                               \
  } while (0)

#define CHECK_EQ(a, b)                                                                        \
  do {                                                                                        \
    auto va_ = (a);                                                                           \
    auto vb_ = (b);                                                                           \
    if (!(va_ == vb_)) {                                                                      \
      ++kvtest::failures;                                                                     \
      std::fprintf(stderr, "%s:%d: CHECK_EQ failed: %s != %s\n", __FILE__, __LINE__, #a, #b); \
    }                                                                                         \
  } while (0)

#include <cstring>

#include "check.h"

namespace kvtest {
std::vector<Case>& registry() {
  static std::vector<Case> r;
  return r;
}
int failures = 0;
}  // namespace kvtest

int main(int argc, char** argv) {
  // --list: the cases, without running any (scripts/gpu-check.sh --dry-run on a host without a GPU).
  if (argc > 1 && std::strcmp(argv[1], "--list") == 0) {
    for (auto& c : kvtest::registry()) std::printf("%s.%s\n", c.suite.c_str(), c.name.c_str());
    return kvtest::registry().empty() ? 1 : 0;
  }
  const char* suite = argc > 1 ? argv[1] : nullptr;
  int ran = 0;
  for (auto& c : kvtest::registry()) {
    if (suite && c.suite != suite) continue;
    const int before = kvtest::failures;
    c.fn();
    ++ran;
    std::printf("%s %s.%s\n", kvtest::failures == before ? "ok  " : "FAIL", c.suite.c_str(), c.name.c_str());
  }
  if (ran == 0) {
    std::fprintf(stderr, "no test cases in suite '%s'\n", suite ? suite : "(all)");
    return 1;
  }
  std::printf("%d cases, %d failed checks\n", ran, kvtest::failures);
  return kvtest::failures ? 1 : 0;
}

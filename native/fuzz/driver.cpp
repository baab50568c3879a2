// A small coverage-guided fuzzing driver for LLVMFuzzerTestOneInput targets built with g++ (no
// clang/libFuzzer needed): GCC's -fsanitize-coverage=trace-pc on the code under test calls
// __sanitizer_cov_trace_pc at every basic block; edges (caller PC pairs) go into a bitmap, and a
// mutated input that lights a new edge joins the corpus, as in AFL. ASan and UBSan abort on the
// first report; the input that caused it is written to ./fuzz-crash-<pid> first.
//   kvevents_fuzz [-max_total_time=S] [-runs=N] [-seed=N] [-out=DIR] CORPUS_DIR...
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

constexpr size_t kMapSize = 1 << 16;
uint8_t g_map[kMapSize];
uintptr_t g_prev = 0;

const uint8_t* g_cur = nullptr;
size_t g_cur_size = 0;
char g_crash_path[64];

void on_crash(int sig) {
  // async-signal-safe: open/write/close only
  const int fd = open(g_crash_path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd >= 0 && g_cur) {
    ssize_t w = write(fd, g_cur, g_cur_size);
    (void)w;
    close(fd);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

std::vector<uint8_t> read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), {});
}

// Built-in seeds: the allocation bombs the decoder must refuse without allocating.
std::vector<std::vector<uint8_t>> builtin_seeds() {
  std::vector<std::vector<uint8_t>> s;
  s.push_back({0xdd, 0xff, 0xff, 0xff, 0xff});  // array header claiming ~4 billion items
  s.push_back({0xdf, 0xff, 0xff, 0xff, 0xff});
  s.push_back({0xdb, 0xff, 0xff, 0xff, 0xff});
  for (uint32_t n : {1u << 20, 64u}) {  // [1.0, [nil x n], 0]
    std::vector<uint8_t> b = {0x93, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xdd};
    for (int k = 3; k >= 0; --k) b.push_back(static_cast<uint8_t>(n >> (8 * k)));
    b.insert(b.end(), n, 0xc0);
    b.push_back(0);
    s.push_back(std::move(b));
  }
  return s;
}

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  size_t below(size_t n) { return n ? std::uniform_int_distribution<size_t>(0, n - 1)(rng_) : 0; }

  void mutate(std::vector<uint8_t>& d, const std::vector<std::vector<uint8_t>>& corpus) {
    static const uint8_t interesting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xc0, 0xc1, 0xc2, 0xc3, 0xca, 0xcb, 0xcc,
                                          0xcd, 0xce, 0xcf, 0xd0, 0xd3, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf,
                                          0x90, 0x91, 0x93, 0x9f, 0x80, 0x81, 0x8f, 0xa0, 0xa5, 0xbf, 0xe0, 0xc4};
    const int rounds = 1 + static_cast<int>(below(4));
    for (int r = 0; r < rounds; ++r) {
      switch (below(9)) {
        case 0:
          if (!d.empty()) d[below(d.size())] ^= static_cast<uint8_t>(1u << below(8));
          break;
        case 1:
          if (!d.empty()) d[below(d.size())] = interesting[below(sizeof interesting)];
          break;
        case 2:
          d.insert(d.begin() + static_cast<long>(below(d.size() + 1)), interesting[below(sizeof interesting)]);
          break;
        case 3:
          if (d.size() > 1) {
            const size_t at = below(d.size()), n = 1 + below(std::min<size_t>(16, d.size() - at));
            d.erase(d.begin() + static_cast<long>(at), d.begin() + static_cast<long>(at + n));
          }
          break;
        case 4:
          if (!d.empty()) d.resize(below(d.size()));
          break;
        case 5:
          if (d.size() > 4) {  // a big-endian length somewhere
            const size_t at = below(d.size() - 4);
            const uint32_t v = below(2) ? 0xffffffffu : static_cast<uint32_t>(below(1 << 20));
            for (int k = 0; k < 4; ++k) d[at + k] = static_cast<uint8_t>(v >> (24 - 8 * k));
          }
          break;
        case 6:
          if (!d.empty() && d.size() < (1 << 20)) {  // duplicate a range
            const size_t at = below(d.size()), n = 1 + below(std::min<size_t>(64, d.size() - at));
            std::vector<uint8_t> part(d.begin() + static_cast<long>(at), d.begin() + static_cast<long>(at + n));
            d.insert(d.begin() + static_cast<long>(below(d.size() + 1)), part.begin(), part.end());
          }
          break;
        case 7:
          if (!corpus.empty()) {  // splice with another input
            const auto& o = corpus[below(corpus.size())];
            if (!o.empty() && !d.empty()) {
              const size_t cut = below(d.size()), from = below(o.size());
              d.resize(cut);
              d.insert(d.end(), o.begin() + static_cast<long>(from), o.end());
            }
          }
          break;
        default:
          if (!d.empty()) d[below(d.size())] = static_cast<uint8_t>(below(256));
          break;
      }
    }
  }

 private:
  std::mt19937_64 rng_;
};

// Runs one input; returns how many coverage bytes it set that were never set before.
size_t run(const std::vector<uint8_t>& d, std::vector<uint8_t>& seen) {
  std::memset(g_map, 0, sizeof g_map);
  g_prev = 0;
  g_cur = d.data();
  g_cur_size = d.size();
  LLVMFuzzerTestOneInput(d.data(), d.size());
  size_t fresh = 0;
  for (size_t i = 0; i < kMapSize; ++i) {
    if (!g_map[i]) continue;
    // AFL-style hit-count buckets: a new bucket of an edge counts as new coverage too.
    const uint8_t c = g_map[i];
    const uint8_t bucket = c == 1     ? 1
                           : c == 2   ? 2
                           : c <= 3   ? 4
                           : c <= 7   ? 8
                           : c <= 15  ? 16
                           : c <= 31  ? 32
                           : c <= 127 ? 64
                                      : 128;
    if (!(seen[i] & bucket)) {
      seen[i] |= bucket;
      ++fresh;
    }
  }
  return fresh;
}

}  // namespace

extern "C" {
// Edge coverage from GCC's -fsanitize-coverage=trace-pc (only the code under test is built with it).
void __sanitizer_cov_trace_pc() {
  const uintptr_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  g_map[(pc ^ g_prev) & (kMapSize - 1)]++;
  g_prev = pc >> 1;
}
const char* __asan_default_options() {
  return "abort_on_error=1:detect_leaks=1";
}
const char* __ubsan_default_options() {
  return "abort_on_error=1:halt_on_error=1:print_stacktrace=1";
}
}

int main(int argc, char** argv) {
  double max_time = 10;
  long max_runs = -1;
  uint64_t seed = 1;
  std::string out;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-max_total_time=", 0) == 0) max_time = std::atof(a.c_str() + 16);
    else if (a.rfind("-runs=", 0) == 0) max_runs = std::atol(a.c_str() + 6);
    else if (a.rfind("-seed=", 0) == 0) seed = std::strtoull(a.c_str() + 6, nullptr, 10);
    else if (a.rfind("-out=", 0) == 0) out = a.substr(5);
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    } else dirs.push_back(a);
  }
  std::snprintf(g_crash_path, sizeof g_crash_path, "fuzz-crash-%d", static_cast<int>(getpid()));
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(sig, on_crash);

  std::vector<std::vector<uint8_t>> corpus = builtin_seeds();
  size_t from_disk = 0;
  for (const auto& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (!d) {
      std::fprintf(stderr, "fuzz: cannot open corpus %s\n", dir.c_str());
      return 2;
    }
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      corpus.push_back(read_file(dir + "/" + e->d_name));
      ++from_disk;
    }
    closedir(d);
  }
  if (from_disk == 0) {
    std::fprintf(stderr, "fuzz: no seed inputs found in the corpus directories\n");
    return 2;
  }
  std::vector<uint8_t> seen(kMapSize, 0);
  for (const auto& c : corpus) run(c, seen);
  const size_t seeds = corpus.size();
  Mutator m(seed);
  const auto t0 = std::chrono::steady_clock::now();
  long execs = 0;
  size_t added = 0;
  std::vector<uint8_t> d;
  for (;;) {
    if (max_runs >= 0 && execs >= max_runs) break;
    if ((execs & 63) == 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >= max_time)
      break;
    // Favour small inputs (the 1 MiB seed is expensive to run over and over).
    size_t pick = m.below(corpus.size());
    for (int k = 0; k < 4 && corpus[pick].size() > 4096; ++k) pick = m.below(corpus.size());
    d = corpus[pick];
    m.mutate(d, corpus);
    if (d.size() > (1 << 16) && corpus[pick].size() <= (1 << 16)) d.resize(1 << 16);
    ++execs;
    if (run(d, seen)) {
      corpus.push_back(d);
      ++added;
      if (!out.empty()) {
        char name[64];
        std::snprintf(name, sizeof name, "/new-%zu-%ld", added, execs);
        std::ofstream(out + name, std::ios::binary)
            .write(reinterpret_cast<const char*>(d.data()), static_cast<long>(d.size()));
      }
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t edges = 0;
  for (uint8_t s : seen) edges += s != 0;
  std::printf(
      "fuzz_decoder: %ld execs in %.1f s (%.0f/s, %.1f cpu-s), corpus %zu seeds (%zu on disk) + %zu found, %zu edges, "
      "no crash\n",
      execs, secs, execs / std::max(secs, 1e-9), double(clock()) / CLOCKS_PER_SEC, seeds, from_disk, added, edges);
  return 0;
}

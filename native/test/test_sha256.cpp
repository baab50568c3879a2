// SHA-256: NIST FIPS 180-4 example vectors on every backend, and SHA-NI vs portable agreement.
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "sglang_chain.h"
#include "sha256.h"

using namespace kv;

namespace {

std::string hex_of(const std::string& msg) {
  uint8_t d[32];
  sha256(msg.data(), msg.size(), d);
  return digest_hex(d);
}

std::vector<Sha256Backend> backends() {
  std::vector<Sha256Backend> b{Sha256Backend::Portable};
  if (sha256_shani_supported()) b.push_back(Sha256Backend::ShaNi);
  return b;
}

struct BackendGuard {
  Sha256Backend saved = sha256_backend();
  ~BackendGuard() { sha256_set_backend(saved); }
};

}  // namespace

TEST_CASE(sha256, nist_vectors) {
  BackendGuard g;
  for (auto b : backends()) {
    CHECK(sha256_set_backend(b));
    CHECK_EQ(hex_of(""), std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    CHECK_EQ(hex_of("abc"), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    CHECK_EQ(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
             std::string("248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"));
    CHECK_EQ(hex_of("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmn"
                    "opqrstnopqrstu"),
             std::string("cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"));
    CHECK_EQ(hex_of(std::string(1000000, 'a')),
             std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
  }
}

TEST_CASE(sha256, shani_matches_portable_random) {
  if (!sha256_shani_supported()) {
    std::printf("skip: this CPU has no SHA-NI; only the portable path exists here\n");
    return;
  }
  BackendGuard g;
  std::mt19937_64 rng(42);
  for (int iter = 0; iter < 300; ++iter) {
    std::string msg(rng() % 2000, '\0');
    for (auto& c : msg) c = char(rng());
    sha256_set_backend(Sha256Backend::Portable);
    const std::string a = hex_of(msg);
    sha256_set_backend(Sha256Backend::ShaNi);
    CHECK_EQ(hex_of(msg), a);
  }
}

TEST_CASE(sha256, streaming_split_points) {
  std::string msg(300, '\0');
  for (size_t i = 0; i < msg.size(); ++i) msg[i] = char(i * 7 + 1);
  const std::string whole = hex_of(msg);
  for (size_t cut = 0; cut <= msg.size(); cut += 13) {
    uint8_t d[32];
    Sha256().update(msg.data(), cut).update(msg.data() + cut, msg.size() - cut).final(d);
    CHECK_EQ(digest_hex(d), whole);
  }
}

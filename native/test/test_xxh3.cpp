// Dynamo hashes over the xxHash library: the wrapper is the library, and the block / seed /
// chain composition follows the spec (hashing.md §2).
#include <random>
#include <vector>

#include "check.h"
#include "dynamo.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

using namespace kv;

TEST_CASE(xxh3, wrapper_is_the_library) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> data(rng() % 600);
    for (auto& b : data) b = uint8_t(rng());
    const uint64_t seed = rng();
    CHECK_EQ(xxh3_64(data.data(), data.size(), seed), XXH3_64bits_withSeed(data.data(), data.size(), seed));
  }
}

TEST_CASE(xxh3, dynamo_seed_and_chain) {
  CHECK_EQ(dynamo_seed("", ""), uint64_t(1337));
  CHECK_EQ(dynamo_seed("ad", ""), uint64_t(1337) + XXH3_64bits_withSeed("ad", 2, 0));
  CHECK_EQ(dynamo_seed("ad", "ns"),
           uint64_t(1337) + XXH3_64bits_withSeed("ad", 2, 0) + XXH3_64bits_withSeed("ns", 2, 1));

  std::vector<uint32_t> t(13);
  for (uint32_t i = 0; i < 13; ++i) t[i] = i * 1000003u;
  std::vector<uint64_t> off{0, 13};
  for (bool eagle : {false, true}) {
    DynamoBatch b;
    b.tokens = t.data();
    b.offsets = off.data();
    b.nseq = 1;
    b.block_size = 4;
    b.eagle = eagle;
    b.seed = 99;
    std::vector<uint64_t> bo(2);
    const uint64_t n = dynamo_block_offsets(b, bo.data());
    CHECK_EQ(n, uint64_t(3));
    std::vector<uint64_t> local(n), seq(n);
    dynamo_local_hashes(b, bo.data(), local.data());
    dynamo_sequence_hashes(local.data(), n, seq.data());
    for (uint64_t i = 0; i < n; ++i) {
      CHECK_EQ(local[i], XXH3_64bits_withSeed(t.data() + 4 * i, (eagle ? 5 : 4) * 4, 99));
    }
    CHECK_EQ(seq[0], local[0]);
    for (uint64_t i = 1; i < n; ++i) {
      uint64_t pair[2] = {seq[i - 1], local[i]};
      CHECK_EQ(seq[i], XXH3_64bits_withSeed(pair, 16, 1337));
    }
  }
  CHECK_EQ(dynamo_block_count(12, 4, true), uint64_t(2));
  CHECK_EQ(dynamo_block_count(5, 2, true), uint64_t(2));
  CHECK_EQ(dynamo_block_count(3, 0, false), uint64_t(0));
}

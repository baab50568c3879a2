// The CUDA SGLang page chain against the CPU hash core, byte for byte: ragged batches, page sizes
// from 1 to 64, plain and EAGLE bigram units, with and without a prior digest.
#include <random>
#include <vector>

#include "check.h"
#include "sglang_chain.h"
#include "sglang_chain_cuda.h"

TEST_CASE(cuda_hash, sglang_chains_match_the_cpu_hash_core) {
  std::mt19937 rng(21);
  int compared = 0;
  for (uint32_t page_size : {1u, 16u, 64u}) {
    for (bool bigram : {false, true}) {
      for (bool with_prior : {false, true}) {
        const size_t nseq = 1 + rng() % 300;
        std::vector<uint64_t> offsets(nseq + 1, 0);
        for (size_t s = 0; s < nseq; ++s) offsets[s + 1] = offsets[s] + rng() % (6 * page_size + 3);
        std::vector<uint32_t> tokens(offsets[nseq]);
        for (auto& t : tokens) t = rng();
        uint8_t prior[32];
        for (auto& b : prior) b = uint8_t(rng());
        kv::ChainBatch b;
        b.tokens = tokens.data();
        b.offsets = offsets.data();
        b.nseq = nseq;
        b.page_size = page_size;
        b.bigram = bigram;
        b.prior = with_prior ? prior : nullptr;
        std::vector<uint64_t> po(nseq + 1);
        const uint64_t pages = kv::sglang_page_offsets(b, po.data());
        std::vector<uint8_t> want(32 * pages), got(32 * pages, 0);
        kv::sglang_chain_batch(b, po.data(), want.data());
        const kv::CudaStatus st = kv::cuda_sglang_chain(tokens.data(), tokens.size(), offsets.data(), nseq, po.data(),
                                                        page_size, bigram, b.prior, got.data());
        if (!st.ok()) std::fprintf(stderr, "cuda_sglang_chain: %s %s\n", st.name.c_str(), st.message.c_str());
        CHECK(st.ok());
        CHECK(got == want);
        compared += pages > 0;
      }
    }
  }
  CHECK(compared >= 10);  // the batches hashed real pages, not only empty sequences
}

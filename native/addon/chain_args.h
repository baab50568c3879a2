// The arguments sglangChain (CPU) and sglangChainCuda share, checked in one place:
// (tokens: Uint32Array, offsets: Uint32Array|null, pageSize, bigram, prior: 32 bytes|null).
#pragma once
#include <cstring>
#include <vector>

#include "args.h"
#include "sglang_chain.h"

namespace kvglue {

struct ChainArgs {
  View<const uint32_t> tokens;
  std::vector<uint64_t> offsets;
  uint8_t prior[32];                  // copied: the caller's buffer may alias the tokens
  kv::ChainBatch batch;               // points into the members above: never copy a ChainArgs
  std::vector<uint64_t> page_offsets;  // nseq + 1
  uint64_t pages = 0;

  ChainArgs(const Napi::CallbackInfo& info, const char* fn) {
    RequireArgs(info, 3, fn);
    tokens = TypedArg<const uint32_t>(info, 0, "tokens", napi_uint32_array, "Uint32Array");
    offsets = OffsetsArg(info, 1, "offsets", tokens.length);
    batch.tokens = tokens.data;
    batch.offsets = offsets.data();
    batch.nseq = offsets.size() - 1;
    batch.page_size = UintArg(info, 2, "pageSize", 1, 1u << 30);
    batch.bigram = BoolArg(info, 3, "bigram");
    if (auto p = OptionalBytesArg(info, 4, "prior", 32)) {
      std::memcpy(prior, p->data, 32);
      batch.prior = prior;
    }
    page_offsets.resize(batch.nseq + 1);
    pages = kv::sglang_page_offsets(batch, page_offsets.data());
    CheckOutputBytes(info.Env(), pages * 32, fn);
  }
  ChainArgs(const ChainArgs&) = delete;
  ChainArgs& operator=(const ChainArgs&) = delete;
};

}  // namespace kvglue

// SHA-256 on the CPU: SHA-NI when the CPU has it, the portable code otherwise, chosen at run
// time (and switchable, so tests can compare both paths on one machine).
#pragma once
#include <cstddef>
#include <cstdint>

#include "page_message.h"

namespace kv {

enum class Sha256Backend { Portable, ShaNi };

bool sha256_shani_supported();
Sha256Backend sha256_backend();
// Returns false (and changes nothing) when the CPU lacks the requested instructions.
bool sha256_set_backend(Sha256Backend b);
const char* sha256_backend_name(Sha256Backend b);

// Compress whole 64-byte blocks with the active backend.
void sha256_compress(uint32_t h[8], const uint8_t* blocks, size_t nblocks);

// One page digest, and two independent ones interleaved (hides SHA-NI latency).
void sha256_page_digest(const PageMessage& m, uint8_t out[32]);
void sha256_page_digest2(const PageMessage& a, uint8_t out_a[32], const PageMessage& b, uint8_t out_b[32]);

// Streaming hash for small messages (namespace seeds, tests).
class Sha256 {
 public:
  Sha256() { sha256_init(h_); }
  Sha256& update(const void* data, size_t len);
  void final(uint8_t out[32]);

 private:
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

void sha256(const void* data, size_t len, uint8_t out[32]);

namespace detail {
// SHA-NI entry points (sha256_shani.cpp); only called when sha256_shani_supported().
void shani_compress(uint32_t h[8], const uint8_t* blocks, size_t nblocks);
void shani_page_digest(const PageMessage& m, uint8_t out[32]);
void shani_page_digest2(const PageMessage& a, uint8_t* out_a, const PageMessage& b, uint8_t* out_b);
bool shani_cpu_has();
}  // namespace detail

}  // namespace kv

// Run-time choice of the SHA-256 backend and the generic streaming hash.
#include "sha256.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kv {
namespace {

Sha256Backend initial_backend() {
  // KVCTL_SHA256=portable forces the fallback (for benchmarks and for hosts to compare).
  const char* env = std::getenv("KVCTL_SHA256");
  if (env && std::strcmp(env, "portable") == 0) return Sha256Backend::Portable;
  return detail::shani_cpu_has() ? Sha256Backend::ShaNi : Sha256Backend::Portable;
}

std::atomic<Sha256Backend>& active() {
  static std::atomic<Sha256Backend> b{initial_backend()};
  return b;
}

}  // namespace

bool sha256_shani_supported() {
  return detail::shani_cpu_has();
}
Sha256Backend sha256_backend() {
  return active().load(std::memory_order_relaxed);
}

bool sha256_set_backend(Sha256Backend b) {
  if (b == Sha256Backend::ShaNi && !detail::shani_cpu_has()) return false;
  active().store(b, std::memory_order_relaxed);
  return true;
}

const char* sha256_backend_name(Sha256Backend b) {
  return b == Sha256Backend::ShaNi ? "sha-ni" : "portable";
}

void sha256_compress(uint32_t h[8], const uint8_t* blocks, size_t nblocks) {
  if (sha256_backend() == Sha256Backend::ShaNi) return detail::shani_compress(h, blocks, nblocks);
  for (size_t i = 0; i < nblocks; ++i) sha256_compress_portable(h, blocks + 64 * i);
}

void sha256_page_digest(const PageMessage& m, uint8_t out[32]) {
  if (sha256_backend() == Sha256Backend::ShaNi) return detail::shani_page_digest(m, out);
  page_digest_portable(m, out);
}

void sha256_page_digest2(const PageMessage& a, uint8_t out_a[32], const PageMessage& b, uint8_t out_b[32]) {
  if (sha256_backend() == Sha256Backend::ShaNi) return detail::shani_page_digest2(a, out_a, b, out_b);
  page_digest_portable(a, out_a);
  page_digest_portable(b, out_b);
}

Sha256& Sha256::update(const void* data, size_t len) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += len;
  if (buffered_) {
    size_t take = 64 - buffered_ < len ? 64 - buffered_ : len;
    std::memcpy(buf_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    len -= take;
    if (buffered_ < 64) return *this;
    sha256_compress(h_, buf_, 1);
    buffered_ = 0;
  }
  if (len >= 64) {
    sha256_compress(h_, p, len / 64);
    p += len / 64 * 64;
    len %= 64;
  }
  std::memcpy(buf_, p, len);
  buffered_ = len;
  return *this;
}

void Sha256::final(uint8_t out[32]) {
  const uint64_t bits = total_ * 8;
  buf_[buffered_++] = 0x80;
  if (buffered_ > 56) {
    std::memset(buf_ + buffered_, 0, 64 - buffered_);
    sha256_compress(h_, buf_, 1);
    buffered_ = 0;
  }
  std::memset(buf_ + buffered_, 0, 56 - buffered_);
  for (int k = 0; k < 8; ++k) buf_[56 + k] = uint8_t(bits >> (56 - 8 * k));
  sha256_compress(h_, buf_, 1);
  sha256_store_digest(h_, out);
}

void sha256(const void* data, size_t len, uint8_t out[32]) {
  Sha256().update(data, len).final(out);
}

}  // namespace kv

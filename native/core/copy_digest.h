// Per-page SHA-256 digests of pool contents, in canonical page order (see layout_pool.h).
// The SHA-256 itself is the native core's (sha256_portable.h compression on the GPU, kv::Sha256
// with SHA-NI when present on the CPU); this file only streams a page's chunks into it.
#pragma once
#include <cstdint>

#include "hd.h"
#include "layout_pool.h"
#include "page_message.h"  // sha256_store_digest
#include "sha256_portable.h"

namespace kv {
namespace copy {

// Streaming SHA-256 over the portable compression function, usable in device code (one thread
// per page). Host code uses kv::Sha256 instead (SHA-NI); tests check the two agree.
struct Sha256Stream {
  uint32_t h[8];
  uint8_t buf[64];
  uint32_t nbuf;
  uint64_t total;

  KV_HD void init() {
    sha256_init(h);
    nbuf = 0;
    total = 0;
  }
  KV_HD void update(const uint8_t* p, uint64_t len) {
    total += len;
    while (len) {
      if (nbuf == 0 && len >= 64) {
        sha256_compress_portable(h, p);
        p += 64;
        len -= 64;
        continue;
      }
      const uint64_t take = (64 - nbuf) < len ? (64 - nbuf) : len;
      for (uint64_t i = 0; i < take; ++i) buf[nbuf + i] = p[i];
      nbuf += uint32_t(take);
      p += take;
      len -= take;
      if (nbuf == 64) {
        sha256_compress_portable(h, buf);
        nbuf = 0;
      }
    }
  }
  KV_HD void final(uint8_t out[32]) {
    const uint64_t bits = total * 8;
    buf[nbuf++] = 0x80;
    if (nbuf > 56) {
      while (nbuf < 64) buf[nbuf++] = 0;
      sha256_compress_portable(h, buf);
      nbuf = 0;
    }
    while (nbuf < 56) buf[nbuf++] = 0;
    for (int k = 0; k < 8; ++k) buf[56 + k] = uint8_t(bits >> (56 - 8 * k));
    sha256_compress_portable(h, buf);
    sha256_store_digest(h, out);
  }
};

// Feeds page p of a pool (base, pages) to `hasher.update(ptr, len)` in canonical order.
template <class Hasher>
KV_HD inline void feed_page(const Layout& L, const uint8_t* base, uint64_t pages, uint64_t p, Hasher& hasher) {
  const Gran g = canonical_gran(L);
  const uint64_t cpp = chunks_per_page(L, g), cb = chunk_bytes(L, g);
  for (uint64_t c = 0; c < cpp; ++c) hasher.update(base + chunk_offset(L, pages, p, c, g), cb);
}

KV_HD inline void page_digest_stream(const Layout& L, const uint8_t* base, uint64_t pages, uint64_t p,
                                     uint8_t out[32]) {
  Sha256Stream st;
  st.init();
  feed_page(L, base, pages, p, st);
  st.final(out);
}

}  // namespace copy
}  // namespace kv

// Device and pinned buffers for the GPU checks: freed on every path; a failed allocation is a
// failed check (the Status message on stderr), never an abort.
#pragma once
#include <cstdio>
#include <vector>

#include "copy_cuda.h"

namespace kvgpu {

namespace cu = kv::copy::cuda;

struct Buffer {
  int dev = 0;
  bool pinned = false;
  uint8_t* p = nullptr;
  uint64_t bytes = 0;
  Buffer(int d, bool host, uint64_t n) : dev(d), pinned(host), bytes(n) {
    void* out = nullptr;
    const kv::copy::Status s = host ? cu::alloc_pinned(d, n, &out) : cu::alloc_device(d, n, &out);
    if (!s.ok())
      std::fprintf(stderr, "allocation of %llu bytes failed: %s\n", (unsigned long long)n, s.message.c_str());
    p = static_cast<uint8_t*>(out);
  }
  ~Buffer() {
    if (pinned) cu::free_pinned(p);
    else cu::free_device(dev, p);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  bool ok() const { return p != nullptr; }
  // Host bytes in, host bytes out (any direction: cudaMemcpyDefault).
  bool upload(const std::vector<uint8_t>& h) { return cu::copy_bytes(dev, p, h.data(), h.size()).ok(); }
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> h(bytes);
    if (!cu::copy_bytes(dev, h.data(), p, bytes).ok()) h.clear();
    return h;
  }
};

}  // namespace kvgpu

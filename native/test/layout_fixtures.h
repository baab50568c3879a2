// Layouts for the copy tests, built field by field so a test reads as the dims it uses.
#pragma once
#include "layout_pool.h"

namespace kvtest {

inline kv::copy::Layout make_layout(kv::copy::LayoutKind k, uint32_t ps, uint32_t layers, uint32_t kvn, uint32_t heads,
                                    uint32_t hd, uint32_t dt) {
  kv::copy::Layout L;
  L.kind = k;
  L.page_size = ps;
  L.layers = layers;
  L.kv = kvn;
  L.heads = heads;
  L.head_dim = hd;
  L.dtype_size = dt;
  return L;
}

}  // namespace kvtest

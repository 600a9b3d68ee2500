// GELU on FP16 and BF16 data by lookup: a 16-bit input has only 65,536 bit patterns, so GELU(x)
// rounded to the type and GELU'(x) in float are read from tables built once from
// vector_math.h's functions, instead of evaluating erf's polynomial per element (about 250
// instructions a vector of 16: airbench94's BF16 GELU ran at a third of memory speed).
#pragma once

#include <cstdint>

#include "kernels/cpu/vector_math.h"
#include "kernels/numeric.h"

namespace kernels::cpu {

// gelu_bwd_vec(x, gy) = gy * gelu_slope_vec(x): the product is the only rounding after the
// table's float, so the lookup gives the polynomial path's bits (tests/test_vector_math.cpp
// checks all 65,536 inputs both ways).
struct Gelu16Table {
  uint16_t forward[65536];  // bits of GELU(x) rounded to the type, by x's bits
  float slope[65536];       // GELU'(x) in float, by x's bits
};

// Built on first use (about a millisecond; C++ makes the first call thread-safe), 384 KiB a
// type. The loops are the ones the polynomial path runs, over every bit pattern in order.
template <class T> const Gelu16Table& gelu16_table() {
  static_assert(sizeof(T) == 2, "FP16 and BF16 only");
  // Never freed: a GELU running while the program exits must still find it.
  static const Gelu16Table* const table = [] {
    auto* t = new Gelu16Table;
    for (uint32_t b = 0; b < 65536; ++b) {
      const float x = load_simd(T::from_bits(static_cast<uint16_t>(b)));
      t->forward[b] = store_simd<T>(gelu_fwd_vec(x)).bits;
      t->slope[b] = gelu_slope_vec(x);
    }
    return t;
  }();
  return *table;
}

}  // namespace kernels::cpu

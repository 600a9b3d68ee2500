// CPU range statistics: one pass counting each value's FP16 buckets (kernels/range_math.h).
#pragma once

#include <cmath>
#include <cstring>

#include "kernels/numeric.h"
#include "kernels/range_math.h"
#include "kernels/shapes.h"

namespace kernels::cpu {

// *out = the counts of x[0, n); `scale`: the loss scale the values carry (1 for activations).
template <class T> void range_stats(const T* x, int64_t n, double scale, RangeCounts* out, Stream = nullptr) {
  using A = acc_t<T>;
  const A unscaled_edge = static_cast<A>(kFp16FlushEdge * scale);
  RangeCounts r{};
  float absmax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const A v = static_cast<A>(x[i]);
    const unsigned b = range_buckets<A>(v, unscaled_edge);
    for (int k = 0; k < kRangeBuckets; ++k) r.count[k] += (b >> k) & 1u;
    if (!(b & ((1u << kRangeInf) | (1u << kRangeNan)))) absmax = std::fmax(absmax, static_cast<float>(std::fabs(v)));
  }
  std::memcpy(&r.absmax_bits, &absmax, sizeof absmax);
  *out = r;
}

}  // namespace kernels::cpu

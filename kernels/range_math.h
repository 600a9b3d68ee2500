// Where a value sits against FP16's edges: the buckets the range report counts, one formula
// for the CPU reference and the CUDA kernel (kernels/{cpu,cuda}/range_stats).
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace kernels {

// FP16's edges. |x| <= 2^-25 rounds to zero (2^-25 is the midpoint to the smallest subnormal,
// 2^-24, and ties go to the even zero); |x| < 2^-14 is below the smallest normal.
constexpr double kFp16FlushEdge = 2.98023223876953125e-08;  // 2^-25
constexpr double kFp16MinNormal = 6.103515625e-05;          // 2^-14
constexpr double kFp16NearOverflow = 32752.0;               // 65504 / 2: within a factor 2 of overflow
constexpr double kFp16Overflow = 65520.0;                   // 65504 + half an ulp: rounds to inf in FP16

// The buckets, in the order RangeCounts::count holds them; a value's buckets come as bits
// (1 << bucket) from range_buckets.
enum RangeBucket : int {
  kRangeZero,           // exactly 0
  kRangeSubnormal,      // would be an FP16 subnormal: 2^-25 < |x| < 2^-14
  kRangeFlush,          // non-zero, but 0 in FP16: |x| <= 2^-25
  kRangeFlushUnscaled,  // non-zero, and x / scale would be 0 in FP16: |x| <= 2^-25 * scale
  kRangeNearOverflow,   // 32752 <= |x| < 65520: within a factor 2 of FP16's overflow
  kRangeOverflow,       // finite here but inf in FP16: 65520 <= |x| (FP32, BF16 and FP64 tensors)
  kRangeInf,
  kRangeNan,
  kRangeBuckets
};

// The counts of one pass over a tensor (device or host memory; zeroed before the pass).
struct RangeCounts {
  unsigned long long count[kRangeBuckets];
  unsigned int absmax_bits;  // float bits of the largest finite |x| (non-negative floats order like their bits)
  unsigned int unused;
};

// `unscaled_edge` = 2^-25 * scale, in x's accumulation type.
template <class A> ENGINE_HD unsigned range_buckets(A x, A unscaled_edge) {
  if (x != x) return 1u << kRangeNan;
  const A a = x < A(0) ? -x : x;
  if (a == A(0)) return 1u << kRangeZero;
  if (a > A(3.4028234663852886e38)) return 1u << kRangeInf;  // beyond FP32's largest finite: inf (F64 too)
  unsigned b = 0;
  if (a <= A(kFp16FlushEdge)) b |= 1u << kRangeFlush;
  else if (a < A(kFp16MinNormal)) b |= 1u << kRangeSubnormal;
  if (a <= unscaled_edge) b |= 1u << kRangeFlushUnscaled;
  if (a >= A(kFp16Overflow)) b |= 1u << kRangeOverflow;
  else if (a >= A(kFp16NearOverflow)) b |= 1u << kRangeNearOverflow;
  return b;
}

}  // namespace kernels

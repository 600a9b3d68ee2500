// CUDA range statistics: the GPU twin of kernels/cpu/range_stats.h, one pass per tensor.
#pragma once

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/numeric.h"
#include "kernels/range_math.h"

namespace kernels::cuda {

// *out (device memory) = the counts of x[0, n): zeroed, then counted, on `stream`; no wait.
template <class T> void range_stats(const T* x, int64_t n, double scale, RangeCounts* out, cudaStream_t stream);

}  // namespace kernels::cuda

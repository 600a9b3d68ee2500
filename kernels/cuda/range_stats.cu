// CUDA range statistics: a grid-stride pass; each thread counts its values' buckets
// (kernels/range_math.h), a block merges its threads' counts in shared memory, and one
// atomic per counter and block adds them to the tensor's RangeCounts.
#include "kernels/cuda/range_stats.h"

#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {
namespace {

using detail::grid_for;
using detail::kBlock;

static_assert(kBlock > kRangeBuckets, "the block merge gives one thread per counter and one to absmax");

template <class T>
__global__ void range_stats_kernel(const T* __restrict__ x, int64_t n, acc_t<T> unscaled_edge, RangeCounts* out) {
  using A = acc_t<T>;
  __shared__ unsigned long long counts[kRangeBuckets];
  __shared__ unsigned int absmax_bits;
  if (threadIdx.x < kRangeBuckets) counts[threadIdx.x] = 0;
  if (threadIdx.x == 0) absmax_bits = 0;
  __syncthreads();
  unsigned long long local[kRangeBuckets] = {};
  float absmax = 0.0f;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const A v = static_cast<A>(x[i]);
    const unsigned b = range_buckets<A>(v, unscaled_edge);
#pragma unroll
    for (int k = 0; k < kRangeBuckets; ++k) local[k] += (b >> k) & 1u;
    // fabsf, not a comparison: -0.0 must count as +0.0, or its bits would win the atomicMax.
    if (!(b & ((1u << kRangeInf) | (1u << kRangeNan)))) absmax = fmaxf(absmax, fabsf(static_cast<float>(v)));
  }
#pragma unroll
  for (int k = 0; k < kRangeBuckets; ++k)
    if (local[k]) atomicAdd(&counts[k], local[k]);
  // Non-negative floats order like their bit patterns, so an integer max is a float max.
  atomicMax(&absmax_bits, __float_as_uint(absmax) & 0x7FFFFFFFu);
  __syncthreads();
  if (threadIdx.x < kRangeBuckets) {
    if (counts[threadIdx.x]) atomicAdd(&out->count[threadIdx.x], counts[threadIdx.x]);
  } else if (threadIdx.x == kRangeBuckets) {
    atomicMax(&out->absmax_bits, absmax_bits);
  }
}

}  // namespace

template <class T> void range_stats(const T* x, int64_t n, double scale, RangeCounts* out, cudaStream_t s) {
  CHECK_CUDA(cudaMemsetAsync(out, 0, sizeof(RangeCounts), s));
  if (n <= 0) return;
  const auto edge = static_cast<acc_t<T>>(kFp16FlushEdge * scale);
  range_stats_kernel<T><<<grid_for(n), kBlock, 0, s>>>(x, n, edge, out);
  CHECK_LAUNCH();
}

template void range_stats<float>(const float*, int64_t, double, RangeCounts*, cudaStream_t);
template void range_stats<double>(const double*, int64_t, double, RangeCounts*, cudaStream_t);
template void range_stats<kernels::half>(const kernels::half*, int64_t, double, RangeCounts*, cudaStream_t);
template void range_stats<kernels::bfloat16>(const kernels::bfloat16*, int64_t, double, RangeCounts*, cudaStream_t);

}  // namespace kernels::cuda

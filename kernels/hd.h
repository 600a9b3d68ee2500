// ENGINE_HD marks element math shared by the CPU reference and the CUDA kernels.
// Compiled by nvcc it is __host__ __device__; by a plain C++ compiler it is nothing. Also
// the precision-preserving erf/exp/sqrt that such shared math calls.
#pragma once

#if defined(__CUDACC__)
#define ENGINE_HD __host__ __device__ __forceinline__
#else
#define ENGINE_HD inline
#endif

#include <cmath>

namespace kernels {
// erf, exp and sqrt in the argument's own precision on both sides: on the host an unqualified
// erf(float) would call C's double erf, on the device it is the float one, and the CPU
// reference must compute the same expression as the GPU.
template <class A> ENGINE_HD A erf_of(A x) {
#if defined(__CUDA_ARCH__)
  return erf(x);
#else
  return std::erf(x);
#endif
}
template <class A> ENGINE_HD A exp_of(A x) {
#if defined(__CUDA_ARCH__)
  return exp(x);
#else
  return std::exp(x);
#endif
}
template <class A> ENGINE_HD A sqrt_of(A x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}
}  // namespace kernels

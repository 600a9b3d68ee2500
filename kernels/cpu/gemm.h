// CPU matrix product C = alpha * op(A) * op(B) + beta * C on raw row-major pointers: the
// arithmetic under the CPU conv2d (im2col) and linear layers. Implemented in gemm.cpp.
#pragma once

#include <cstdint>

#include "kernels/numeric.h"

namespace kernels {
namespace cpu {

enum class Trans { N, T };

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, all row-major with leading dimensions.
//   ta == N: A is M x K, element (i,k) at A[i*lda + k];  ta == T: A is K x M, at A[k*lda + i].
//   tb == N: B is K x N, element (k,j) at B[k*ldb + j];  tb == T: B is N x K, at B[j*ldb + k].
//   C is M x N, element (i,j) at C[i*ldc + j].
// T is float, double, kernels::half or kernels::bfloat16 (BF16 runs on the CPU's BF16 unit where
// it has one: bf16_tiles.h). Products are summed in acc_t<T>
// (double for double, float otherwise); alpha and beta are taken as double so nothing is lost
// for T = double and are converted to acc_t<T> for the others. For half/bfloat16 the whole
// K-sum stays in float and C is rounded to T once, at the end.
// beta == 0 writes C without reading it (C may hold NaN); alpha == 0 or K == 0 reads neither
// A nor B and leaves C = beta * C. M, N or K may be 0. Uses OpenMP threads when built with it
// and the product is large enough (inside a parallel region: the calling thread only); safe
// to call from several threads at once. Reuses per-thread scratch, never freed until the
// thread exits (up to ~10 MB; more only for K beyond ~30000).
template <class T>
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, double beta, T* C, int64_t ldc);

extern template void gemm<float>(Trans, Trans, int64_t, int64_t, int64_t, double, const float*,
                                 int64_t, const float*, int64_t, double, float*, int64_t);
extern template void gemm<double>(Trans, Trans, int64_t, int64_t, int64_t, double, const double*,
                                  int64_t, const double*, int64_t, double, double*, int64_t);
extern template void gemm<half>(Trans, Trans, int64_t, int64_t, int64_t, double, const half*,
                                int64_t, const half*, int64_t, double, half*, int64_t);
extern template void gemm<bfloat16>(Trans, Trans, int64_t, int64_t, int64_t, double,
                                    const bfloat16*, int64_t, const bfloat16*, int64_t, double,
                                    bfloat16*, int64_t);

}  // namespace cpu
}  // namespace kernels

// Matrix products on the GPU through cuBLASLt: the row-major contract of kernels/cpu/gemm.h
// plus the linear layer (x [rows, in], w [out, in] as in PyTorch, bias [out]) forward and
// backward. T: float, kernels::half, kernels::bfloat16; FP32 accumulation and scaling
// always (CUBLAS_COMPUTE_32F), Tensor Cores for FP16/BF16, and for FP32 only when
// set_allow_tf32(true) (CUBLAS_COMPUTE_32F_FAST_TF32). Row-major is handled by computing
// C^T = op(B)^T op(A)^T in cuBLASLt's column-major terms (operands swapped, no copies).
// Algorithms: cuBLASLt's heuristic, queried once per (shape, transposes, dtype, epilogue,
// pointer alignments) and cached; workspace (<= 32 MiB) from the caching allocator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/shapes.h"

namespace kernels::cuda {

enum class Trans { N, T };
using kernels::Epilogue;

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major with leading dimensions,
// exactly the contract of kernels::cpu::gemm (ta == T: A is stored K x M, etc.). beta == 0
// writes C without reading it; alpha == 0 or K == 0 leaves beta * C; M or N may be 0.
template <class T>
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, float beta, T* C, int64_t ldc, cudaStream_t stream);

// y[rows, out] = act(x[rows, in] * w[out, in]^T + bias[out]) (bias may be null).
// Relu fuses into cuBLASLt's epilogue (RELU_BIAS). Gelu is our exact erf form, which
// cuBLASLt's GELU epilogue (a tanh approximation) is not: the GEMM writes x*w^T + b into
// pre_activation (when non-null, else into y) and gelu_forward makes y from it; keep
// pre_activation for gelu_backward.
template <class T>
void linear_forward(int64_t rows, int64_t in, int64_t out, const T* x, const T* w, const T* bias, T* y, Epilogue ep,
                    cudaStream_t stream, T* pre_activation = nullptr);
// gx[rows, in] = gy[rows, out] * w[out, in].
template <class T>
void linear_backward_data(int64_t rows, int64_t in, int64_t out, const T* gy, const T* w, T* gx, cudaStream_t stream);
// gw[out, in] = gy^T * x; gbias[out] (when non-null) = column sums of gy, from cuBLASLt's
// BGRADB epilogue on the same GEMM when it offers one for the shape, else from
// column_sum (elementwise.h). Both sum in FP32 and round once.
template <class T>
void linear_backward_weight(int64_t rows, int64_t in, int64_t out, const T* x, const T* gy, T* gw, T* gbias,
                            cudaStream_t stream);

// BGRADB on/off (default on; the fallback is always correct), for tests and benchmarks.
void set_gemm_bias_grad_epilogue(bool use);
bool gemm_bias_grad_epilogue();
// How many times a fused epilogue was unavailable and our kernels stood in (for tests/logs).
int64_t gemm_epilogue_fallbacks();
size_t gemm_algo_cache_size();
void clear_gemm_algo_cache();

}  // namespace kernels::cuda

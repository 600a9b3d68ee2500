// CUDA batch-norm over NHWC data viewed as [rows = N*H*W, c], the twin of
// kernels/cpu/batch_norm.h: statistics, gamma/beta and the saved mean/invstd in
// P = acc_t<T> (FP32 for FP16/BF16/FP32 data, FP64 for FP64), data in T.
// Statistics: per-thread Welford over interleaved rows, merged (Chan et al.) in a fixed
// order, so results are deterministic; biased variance for normalising, unbiased for the
// running estimate, running = (1 - momentum) * running + momentum * batch (PyTorch's rule).
#pragma once

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/numeric.h"

namespace kernels::cuda {

// Training: writes save_mean/save_invstd and y; updates running_mean/var when non-null.
template <class T, class P = acc_t<T>>
void batch_norm_forward_train(int64_t rows, int64_t c, const T* x, const P* gamma, const P* beta, P eps, P momentum,
                             P* running_mean, P* running_var, P* save_mean, P* save_invstd, T* y,
                             cudaStream_t stream);
// Inference: the running statistics stand in; save_invstd = 1/sqrt(running_var + eps).
template <class T, class P = acc_t<T>>
void batch_norm_forward_eval(int64_t rows, int64_t c, const T* x, const P* gamma, const P* beta, P eps,
                            const P* running_mean, const P* running_var, P* save_invstd, T* y, cudaStream_t stream);
// dbeta = sum gy, dgamma = sum gy * xhat (written when the pointers are non-null); gx (when
// non-null) = gamma * invstd * (gy - dbeta/M - xhat * dgamma/M) in training, gamma * invstd * gy
// in eval. For eval pass mean = running_mean and invstd = the forward's save_invstd.
template <class T, class P = acc_t<T>>
void batch_norm_backward(int64_t rows, int64_t c, const T* x, const T* gy, const P* gamma, const P* mean,
                        const P* invstd, bool training, T* gx, P* ggamma, P* gbeta, cudaStream_t stream);

// Synchronised batch-norm pieces (data-parallel --sync-bn), the twins of kernels/cpu/batch_norm.h:
// the caller sums each statistic across ranks between the calls; `total` counts all ranks' rows.
// out = column sums of x (center_sum null) or of (x - center_sum / total)^2; deterministic.
template <class T, class P = acc_t<T>>
void batch_norm_sums(int64_t rows, int64_t c, const T* x, const P* center_sum, P total, P* out, cudaStream_t stream);
template <class T, class P = acc_t<T>>
void batch_norm_forward_from_sums(int64_t rows, int64_t c, int64_t total, const T* x, const P* sum, const P* sq,
                                  const P* gamma, const P* beta, P eps, P momentum, P* running_mean, P* running_var,
                                  P* save_mean, P* save_invstd, T* y, cudaStream_t stream);
template <class T, class P = acc_t<T>>
void batch_norm_backward_sums(int64_t rows, int64_t c, const T* x, const T* gy, const P* mean, const P* invstd,
                              P* sums, cudaStream_t stream);
template <class T, class P = acc_t<T>>
void batch_norm_backward_input(int64_t rows, int64_t c, P total, const T* x, const T* gy, const P* gamma,
                               const P* mean, const P* invstd, const P* sums, T* gx, cudaStream_t stream);

}  // namespace kernels::cuda

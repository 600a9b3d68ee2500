// CPU reference batch-norm over NHWC data (channels last): statistics, scale and shift in
// the accumulation type P = acc_t<T> (FP32 for FP16/BF16 data, so a variance above 65504
// is fine), data in T.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/numeric.h"

namespace kernels::cpu {

// y = (x - mean) * invstd * gamma + beta, per channel.
template <class T, class P>
void apply_affine_rows(int64_t rows, int64_t c, const T* x, const P* mean, const P* invstd, const P* gamma,
                       const P* beta, T* y) {
  std::vector<P> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    a[ch] = invstd[ch] * gamma[ch];
    b[ch] = beta[ch] - mean[ch] * a[ch];
  }
#pragma omp parallel for if (rows * c > (1 << 15))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t ch = 0; ch < c; ++ch) y[r * c + ch] = from_acc<T>(P(x[r * c + ch]) * a[ch] + b[ch]);
}

// Training: batch mean and biased variance per channel (two passes for accuracy), saves
// mean and 1/sqrt(var + eps), and updates the running statistics like PyTorch (unbiased
// variance, running = (1 - momentum) * running + momentum * batch).
template <class T, class P = acc_t<T>>
void batchnorm_forward_train(int64_t rows, int64_t c, const T* x, const P* gamma, const P* beta, P eps,
                             P momentum, P* running_mean, P* running_var, P* save_mean, P* save_invstd,
                             T* y) {
#pragma omp parallel for if (c > 8 && rows * c > (1 << 15))
  for (int64_t ch = 0; ch < c; ++ch) {
    P sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += P(x[r * c + ch]);
    const P mean = sum / P(rows);
    P sq = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const P d = P(x[r * c + ch]) - mean;
      sq += d * d;
    }
    const P var = sq / P(rows);
    const P invstd = P(1) / std::sqrt(var + eps);
    save_mean[ch] = mean;
    save_invstd[ch] = invstd;
    if (running_mean) {
      const P unbiased = rows > 1 ? sq / P(rows - 1) : var;
      running_mean[ch] = (P(1) - momentum) * running_mean[ch] + momentum * mean;
      running_var[ch] = (P(1) - momentum) * running_var[ch] + momentum * unbiased;
    }
  }
  apply_affine_rows(rows, c, x, save_mean, save_invstd, gamma, beta, y);
}

// Inference: the running statistics stand in for the batch's.
template <class T, class P = acc_t<T>>
void batchnorm_forward_eval(int64_t rows, int64_t c, const T* x, const P* gamma, const P* beta, P eps,
                            const P* running_mean, const P* running_var, P* save_invstd, T* y) {
  for (int64_t ch = 0; ch < c; ++ch) save_invstd[ch] = P(1) / std::sqrt(running_var[ch] + eps);
  apply_affine_rows(rows, c, x, running_mean, save_invstd, gamma, beta, y);
}

// With xhat = (x - mean) * invstd: dbeta = sum gy, dgamma = sum gy * xhat, and in training
// dx = gamma * invstd * (gy - dbeta / M - xhat * dgamma / M); in eval the statistics are
// constants, so dx = gamma * invstd * gy.
template <class T, class P = acc_t<T>>
void batchnorm_backward(int64_t rows, int64_t c, const T* x, const T* gy, const P* gamma, const P* mean,
                        const P* invstd, bool training, T* gx, P* ggamma, P* gbeta) {
  std::vector<P> dgamma(static_cast<size_t>(c), P(0)), dbeta(static_cast<size_t>(c), P(0));
#pragma omp parallel for if (c > 8 && rows * c > (1 << 15))
  for (int64_t ch = 0; ch < c; ++ch) {
    P sg = 0, sgx = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const P g = P(gy[r * c + ch]);
      sg += g;
      sgx += g * (P(x[r * c + ch]) - mean[ch]) * invstd[ch];
    }
    dbeta[ch] = sg;
    dgamma[ch] = sgx;
  }
  if (gx) {
#pragma omp parallel for if (rows * c > (1 << 15))
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t ch = 0; ch < c; ++ch) {
        const P g = P(gy[r * c + ch]);
        P v = g;
        if (training) {
          const P xhat = (P(x[r * c + ch]) - mean[ch]) * invstd[ch];
          v = g - dbeta[ch] / P(rows) - xhat * dgamma[ch] / P(rows);
        }
        gx[r * c + ch] = from_acc<T>(gamma[ch] * invstd[ch] * v);
      }
    }
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    if (ggamma) ggamma[ch] = dgamma[ch];
    if (gbeta) gbeta[ch] = dbeta[ch];
  }
}

}  // namespace kernels::cpu

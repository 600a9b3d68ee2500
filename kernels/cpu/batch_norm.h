// CPU reference batch-norm over NHWC data (channels last): statistics, scale and shift in
// the accumulation type P = acc_t<T> (FP32 for FP16/BF16 data, so a variance above 65504
// is fine), data in T.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/norm_math.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

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
    for (int64_t ch = 0; ch < c; ++ch) y[r * c + ch] = store_simd<T>(load_simd(x[r * c + ch]) * a[ch] + b[ch]);
}

namespace detail {
// Per-channel column sums over [rows, c] row-major data, cache-friendly: each block of
// kRowBlock rows is summed row by row into its own partial (contiguous, vectorisable), then
// the partials are added in block order, so the result does not depend on the thread count.
// add_row(r, acc) adds row r's contributions into acc[0..c) (and acc[c..2c) when nsums is 2).
constexpr int64_t kRowBlock = 256;
template <class P, class AddRow>
void column_sums(int64_t rows, int64_t c, int nsums, AddRow add_row, P* out) {
  const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock, width = nsums * c;
  std::vector<P> part(static_cast<size_t>(blocks * width), P(0));
#pragma omp parallel for if (rows * c > (1 << 15))
  for (int64_t b = 0; b < blocks; ++b) {
    P* acc = part.data() + b * width;
    const int64_t end = std::min(rows, (b + 1) * kRowBlock);
    for (int64_t r = b * kRowBlock; r < end; ++r) add_row(r, acc);
  }
  for (int64_t j = 0; j < width; ++j) out[j] = P(0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t j = 0; j < width; ++j) out[j] += part[static_cast<size_t>(b * width + j)];
}
}  // namespace detail

// ---- the pieces: statistics from sums --------------------------------------------------------
// Two passes for accuracy: column sums, then squared deviations from the mean they give, then
// normalise. The training kernels below run them over this process's rows; synchronised
// batch-norm (data-parallel --sync-bn) sums each result across ranks between the calls, and
// `total` is then the number of rows over all ranks.

// out[ch] = sum of x (center_sum null), or sum of (x - center_sum[ch] / total)^2.
template <class T, class P = acc_t<T>>
void batch_norm_sums(int64_t rows, int64_t c, const T* x, const P* center_sum, P total, P* out, Stream = nullptr) {
  if (!center_sum) {
    detail::column_sums<P>(rows, c, 1, [&](int64_t r, P* acc) {
      const T* xr = x + r * c;
      for (int64_t ch = 0; ch < c; ++ch) acc[ch] += load_simd(xr[ch]);
    }, out);
    return;
  }
  std::vector<P> mean(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) mean[ch] = center_sum[ch] / total;
  detail::column_sums<P>(rows, c, 1, [&](int64_t r, P* acc) {
    const T* xr = x + r * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      const P d = load_simd(xr[ch]) - mean[ch];
      acc[ch] += d * d;
    }
  }, out);
}

// From the global sums: saves mean and 1/sqrt(var + eps), updates the running statistics
// (when given) and writes y = (x - mean) * invstd * gamma + beta for this rank's rows.
template <class T, class P = acc_t<T>>
void batch_norm_forward_from_sums(int64_t rows, int64_t c, int64_t total, const T* x, const P* sum, const P* sq,
                                  const P* gamma, const P* beta, P eps, P momentum, P* running_mean, P* running_var,
                                  P* save_mean, P* save_invstd, T* y, Stream = nullptr) {
  for (int64_t ch = 0; ch < c; ++ch) {
    save_mean[ch] = sum[ch] / P(total);
    save_invstd[ch] = inv_std(sq[ch] / P(total), eps);
    if (running_mean) update_running_stats(running_mean[ch], running_var[ch], save_mean[ch], sq[ch], total, momentum);
  }
  apply_affine_rows(rows, c, x, save_mean, save_invstd, gamma, beta, y);
}

// sums[0..c) = sum gy, sums[c..2c) = sum gy * xhat over this rank's rows.
template <class T, class P = acc_t<T>>
void batch_norm_backward_sums(int64_t rows, int64_t c, const T* x, const T* gy, const P* mean, const P* invstd,
                              P* sums, Stream = nullptr) {
  detail::column_sums<P>(rows, c, 2, [&](int64_t r, P* acc) {
    const T *xr = x + r * c, *gr = gy + r * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      const P g = load_simd(gr[ch]);
      acc[ch] += g;
      acc[c + ch] += g * (load_simd(xr[ch]) - mean[ch]) * invstd[ch];
    }
  }, sums);
}

// gx = gamma * invstd * (gy - sums_gy / total - xhat * sums_gyxhat / total), the sums global.
template <class T, class P = acc_t<T>>
void batch_norm_backward_input(int64_t rows, int64_t c, P total, const T* x, const T* gy, const P* gamma,
                               const P* mean, const P* invstd, const P* sums, T* gx, Stream = nullptr) {
  std::vector<P> k(static_cast<size_t>(c)), db(static_cast<size_t>(c)), dg(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    k[ch] = gamma[ch] * invstd[ch];
    db[ch] = sums[ch] / total;
    dg[ch] = sums[c + ch] / total;
  }
#pragma omp parallel for if (rows * c > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T *xr = x + r * c, *gr = gy + r * c;
    T* out = gx + r * c;
    for (int64_t ch = 0; ch < c; ++ch) {
      const P xhat = (load_simd(xr[ch]) - mean[ch]) * invstd[ch];
      out[ch] = store_simd<T>(k[ch] * (load_simd(gr[ch]) - db[ch] - xhat * dg[ch]));
    }
  }
}


// Training: batch mean and biased variance per channel (two passes for accuracy), saves
// mean and 1/sqrt(var + eps), and updates the running statistics like PyTorch (unbiased
// variance, running = (1 - momentum) * running + momentum * batch).
template <class T, class P = acc_t<T>>
void batch_norm_forward_train(int64_t rows, int64_t c, const T* x, const P* gamma, const P* beta, P eps,
                             P momentum, P* running_mean, P* running_var, P* save_mean, P* save_invstd,
                             T* y, Stream = nullptr) {
  std::vector<P> sum(static_cast<size_t>(c)), sq(static_cast<size_t>(c));
  batch_norm_sums<T, P>(rows, c, x, nullptr, P(rows), sum.data());
  batch_norm_sums<T, P>(rows, c, x, sum.data(), P(rows), sq.data());
  batch_norm_forward_from_sums<T, P>(rows, c, rows, x, sum.data(), sq.data(), gamma, beta, eps, momentum,
                                     running_mean, running_var, save_mean, save_invstd, y);
}

// Inference: the running statistics stand in for the batch's.
template <class T, class P = acc_t<T>>
void batch_norm_forward_eval(int64_t rows, int64_t c, const T* x, const P* gamma, const P* beta, P eps,
                            const P* running_mean, const P* running_var, P* save_invstd, T* y, Stream = nullptr) {
  for (int64_t ch = 0; ch < c; ++ch) save_invstd[ch] = inv_std(running_var[ch], eps);
  apply_affine_rows(rows, c, x, running_mean, save_invstd, gamma, beta, y);
}

// With xhat = (x - mean) * invstd: dbeta = sum gy, dgamma = sum gy * xhat, and in training
// dx = gamma * invstd * (gy - dbeta / M - xhat * dgamma / M); in eval the statistics are
// constants, so dx = gamma * invstd * gy.
template <class T, class P = acc_t<T>>
void batch_norm_backward(int64_t rows, int64_t c, const T* x, const T* gy, const P* gamma, const P* mean,
                        const P* invstd, bool training, T* gx, P* ggamma, P* gbeta, Stream = nullptr) {
  // sums[0..c) = dbeta = sum gy, sums[c..2c) = dgamma = sum gy * xhat.
  std::vector<P> sums(static_cast<size_t>(2 * c));
  batch_norm_backward_sums<T, P>(rows, c, x, gy, mean, invstd, sums.data());
  const P* dbeta = sums.data();
  const P* dgamma = sums.data() + c;
  if (gx && training) batch_norm_backward_input(rows, c, P(rows), x, gy, gamma, mean, invstd, sums.data(), gx);
  if (gx && !training) {  // the statistics are constants: gx = gamma * invstd * gy
    std::vector<P> k(static_cast<size_t>(c));
    for (int64_t ch = 0; ch < c; ++ch) k[ch] = gamma[ch] * invstd[ch];
#pragma omp parallel for if (rows * c > (1 << 15))
    for (int64_t r = 0; r < rows; ++r) {
      const T* gr = gy + r * c;
      T* out = gx + r * c;
      for (int64_t ch = 0; ch < c; ++ch) out[ch] = store_simd<T>(k[ch] * load_simd(gr[ch]));
    }
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    if (ggamma) ggamma[ch] = dgamma[ch];
    if (gbeta) gbeta[ch] = dbeta[ch];
  }
}

}  // namespace kernels::cpu

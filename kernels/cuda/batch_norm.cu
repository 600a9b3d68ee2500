// Batch-norm kernels. Channels are contiguous in NHWC, so each block takes a tile of 32
// channels (one coalesced 32-element run per row) times 8 row lanes; the y-blocks split the
// rows into interleaved groups whose partial results a second kernel merges per channel.
#include "kernels/cuda/batch_norm.h"

#include "kernels/norm_math.h"

#include <cuda_runtime.h>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using detail::kBlock;

namespace {

// Welford state merge (Chan, Golub, LeVeque): (n, mean, m2) += (nb, mb, m2b).
template <class P> __device__ __forceinline__ void welford_merge(P& n, P& mean, P& m2, P nb, P mb, P m2b) {
  if (nb == P(0)) return;
  if (n == P(0)) {
    n = nb;
    mean = mb;
    m2 = m2b;
    return;
  }
  const P tot = n + nb;
  const P d = mb - mean;
  mean += d * (nb / tot);
  m2 += m2b + d * d * (n * nb / tot);
  n = tot;
}

// partial layout: [3][groups][c] = count, mean, m2.
template <class T, class P>
__global__ void __launch_bounds__(kBlock) stats_partial_kernel(int64_t rows, int64_t c, const T* x, P* partial) {
  __shared__ P sn[8][33], sm[8][33], s2[8][33];
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  P n = 0, mean = 0, m2 = 0;
  if (ch < c) {
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      const P v = P(x[r * c + ch]);
      n += P(1);
      const P d = v - mean;
      mean += d / n;
      m2 += d * (v - mean);
    }
  }
  sn[threadIdx.y][threadIdx.x] = n;
  sm[threadIdx.y][threadIdx.x] = mean;
  s2[threadIdx.y][threadIdx.x] = m2;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    for (int k = 1; k < 8; ++k) welford_merge(n, mean, m2, sn[k][threadIdx.x], sm[k][threadIdx.x], s2[k][threadIdx.x]);
    const int64_t stride = static_cast<int64_t>(gridDim.y) * c;
    const int64_t at = static_cast<int64_t>(blockIdx.y) * c + ch;
    partial[at] = n;
    partial[stride + at] = mean;
    partial[2 * stride + at] = m2;
  }
}

// Per channel: merge the groups in order; save mean/invstd, update running stats, and
// precompute y = x * a + b with a = invstd * gamma, b = beta - mean * a.
template <class P>
__global__ void __launch_bounds__(kBlock)
    stats_final_kernel(int64_t rows, int64_t c, int groups, const P* partial, const P* gamma, const P* beta, P eps,
                       P momentum, P* running_mean, P* running_var, P* save_mean, P* save_invstd, P* ab) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const int64_t stride = static_cast<int64_t>(groups) * c;
  P n = 0, mean = 0, m2 = 0;
  for (int g = 0; g < groups; ++g) {
    const int64_t at = static_cast<int64_t>(g) * c + ch;
    welford_merge(n, mean, m2, partial[at], partial[stride + at], partial[2 * stride + at]);
  }
  const P invstd = inv_std(m2 / P(rows), eps);
  save_mean[ch] = mean;
  save_invstd[ch] = invstd;
  if (running_mean) update_running_stats(running_mean[ch], running_var[ch], mean, m2, rows, momentum);
  const P a = invstd * gamma[ch];
  ab[ch] = a;
  ab[c + ch] = beta[ch] - mean * a;
}

template <class P>
__global__ void __launch_bounds__(kBlock)
    eval_final_kernel(int64_t c, const P* gamma, const P* beta, P eps, const P* running_mean, const P* running_var,
                      P* save_invstd, P* ab) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const P invstd = inv_std(running_var[ch], eps);
  save_invstd[ch] = invstd;
  const P a = invstd * gamma[ch];
  ab[ch] = a;
  ab[c + ch] = beta[ch] - running_mean[ch] * a;
}

// y[r, ch] = x * a[ch] + b[ch]; block (32, 8) over (channel tile, rows), rows grid-strided.
template <class T, class P>
__global__ void __launch_bounds__(kBlock) apply_kernel(int64_t rows, int64_t c, const T* x, const P* ab, T* y) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  if (ch >= c) return;
  const P a = ab[ch], b = ab[c + ch];
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * 8)
    y[r * c + ch] = from_acc<T>(P(x[r * c + ch]) * a + b);
}

// partial layout: [2][groups][c] = sum gy, sum gy * xhat.
template <class T, class P>
__global__ void __launch_bounds__(kBlock) grad_partial_kernel(int64_t rows, int64_t c, const T* x, const T* gy,
                                                               const P* mean, const P* invstd, P* partial) {
  __shared__ P sg[8][33], sgx[8][33];
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  P a = 0, b = 0;
  if (ch < c) {
    const P m = mean[ch], is = invstd[ch];
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      const P g = P(gy[r * c + ch]);
      a += g;
      b += g * (P(x[r * c + ch]) - m) * is;
    }
  }
  sg[threadIdx.y][threadIdx.x] = a;
  sgx[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    for (int k = 1; k < 8; ++k) {
      a += sg[k][threadIdx.x];
      b += sgx[k][threadIdx.x];
    }
    const int64_t stride = static_cast<int64_t>(gridDim.y) * c;
    const int64_t at = static_cast<int64_t>(blockIdx.y) * c + ch;
    partial[at] = a;
    partial[stride + at] = b;
  }
}

template <class P>
__global__ void __launch_bounds__(kBlock)
    grad_final_kernel(int64_t c, int groups, const P* partial, P* sums, P* ggamma, P* gbeta) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const int64_t stride = static_cast<int64_t>(groups) * c;
  P a = 0, b = 0;
  for (int g = 0; g < groups; ++g) {
    a += partial[static_cast<int64_t>(g) * c + ch];
    b += partial[stride + static_cast<int64_t>(g) * c + ch];
  }
  sums[ch] = a;      // dbeta
  sums[c + ch] = b;  // dgamma
  if (gbeta) gbeta[ch] = a;
  if (ggamma) ggamma[ch] = b;
}

template <class T, class P>
__global__ void __launch_bounds__(kBlock)
    grad_input_kernel(int64_t rows, int64_t c, P count, const T* x, const T* gy, const P* gamma, const P* mean,
                      const P* invstd, const P* sums, bool training, T* gx) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  if (ch >= c) return;
  const P m = mean[ch], is = invstd[ch], gi = gamma[ch] * invstd[ch];
  const P dbeta_m = sums[ch] / count, dgamma_m = sums[c + ch] / count;  // count: rows (all ranks' with sync-BN)
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < rows;
       r += static_cast<int64_t>(gridDim.y) * 8) {
    const P g = P(gy[r * c + ch]);
    P v = g;
    if (training) {
      const P xhat = (P(x[r * c + ch]) - m) * is;
      v = g - dbeta_m - xhat * dgamma_m;
    }
    gx[r * c + ch] = from_acc<T>(gi * v);
  }
}

// Sync-BN: partial column sums of x, or of (x - center_sum / total)^2; layout [groups][c].
template <class T, class P>
__global__ void __launch_bounds__(kBlock) sums_partial_kernel(int64_t rows, int64_t c, const T* x,
                                                              const P* center_sum, P total, P* partial) {
  __shared__ P sh[8][33];
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  P a = 0;
  if (ch < c) {
    const P m = center_sum ? center_sum[ch] / total : P(0);
    for (int64_t r = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y; r < rows;
         r += static_cast<int64_t>(gridDim.y) * 8) {
      const P v = P(x[r * c + ch]);
      a += center_sum ? (v - m) * (v - m) : v;
    }
  }
  sh[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    for (int k = 1; k < 8; ++k) a += sh[k][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * c + ch] = a;
  }
}

// out[ch] = the groups' partials added in group order (deterministic).
template <class P>
__global__ void __launch_bounds__(kBlock) sums_final_kernel(int64_t c, int groups, const P* partial, P* out) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  P a = 0;
  for (int g = 0; g < groups; ++g) a += partial[static_cast<int64_t>(g) * c + ch];
  out[ch] = a;
}

// Sync-BN: mean, invstd and the running statistics from the global sums, and y's a and b.
template <class P>
__global__ void __launch_bounds__(kBlock)
    from_sums_final_kernel(int64_t c, int64_t total, const P* sum, const P* sq, const P* gamma, const P* beta, P eps,
                           P momentum, P* running_mean, P* running_var, P* save_mean, P* save_invstd, P* ab) {
  const int64_t ch = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const P mean = sum[ch] / P(total), invstd = inv_std(sq[ch] / P(total), eps);
  save_mean[ch] = mean;
  save_invstd[ch] = invstd;
  if (running_mean) update_running_stats(running_mean[ch], running_var[ch], mean, sq[ch], total, momentum);
  const P a = invstd * gamma[ch];
  ab[ch] = a;
  ab[c + ch] = beta[ch] - mean * a;
}

dim3 tile_grid(int64_t c, int groups) {
  return dim3(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(groups));
}
unsigned channel_blocks(int64_t c) { return static_cast<unsigned>((c + kBlock - 1) / kBlock); }

// Row groups for the element-wise passes (apply, grad input): fill the GPU, <= 65535.
int apply_groups(int64_t rows, int64_t c) {
  const int64_t tiles = (c + 31) / 32;
  const int64_t target = static_cast<int64_t>(context().sm_count) * 8;
  int64_t g = (target + tiles - 1) / tiles;
  g = std::min<int64_t>(g, (rows + 7) / 8);
  g = std::min<int64_t>(g, 65535);
  return static_cast<int>(std::max<int64_t>(g, 1));
}

void check_shape(int64_t rows, int64_t c, const char* op) {
  ENGINE_CHECK(rows > 0 && c > 0, op << ": needs rows > 0 and channels > 0, got rows=" << rows << " c=" << c);
}

}  // namespace

template <class T, class P>
void batch_norm_forward_train(int64_t rows, int64_t c, const T* x, const P* gamma, const P* beta, P eps, P momentum,
                             P* running_mean, P* running_var, P* save_mean, P* save_invstd, T* y, cudaStream_t s) {
  check_shape(rows, c, "batch_norm_forward_train");
  ENGINE_CHECK((running_mean == nullptr) == (running_var == nullptr),
               "batch_norm_forward_train: running mean and variance must both be given or both be null");
  const int groups = detail::row_groups(rows, c);
  Workspace partial(sizeof(P) * 3 * static_cast<size_t>(groups) * static_cast<size_t>(c));
  Workspace ab(sizeof(P) * 2 * static_cast<size_t>(c));
  stats_partial_kernel<T, P><<<tile_grid(c, groups), dim3(32, 8), 0, s>>>(rows, c, x, partial.as<P>());
  CHECK_LAUNCH();
  stats_final_kernel<P><<<channel_blocks(c), kBlock, 0, s>>>(rows, c, groups, partial.as<P>(), gamma, beta, eps,
                                                             momentum, running_mean, running_var, save_mean,
                                                             save_invstd, ab.as<P>());
  CHECK_LAUNCH();
  apply_kernel<T, P><<<tile_grid(c, apply_groups(rows, c)), dim3(32, 8), 0, s>>>(rows, c, x, ab.as<P>(), y);
  CHECK_LAUNCH();
}

template <class T, class P>
void batch_norm_forward_eval(int64_t rows, int64_t c, const T* x, const P* gamma, const P* beta, P eps,
                            const P* running_mean, const P* running_var, P* save_invstd, T* y, cudaStream_t s) {
  check_shape(rows, c, "batch_norm_forward_eval");
  Workspace ab(sizeof(P) * 2 * static_cast<size_t>(c));
  eval_final_kernel<P><<<channel_blocks(c), kBlock, 0, s>>>(c, gamma, beta, eps, running_mean, running_var,
                                                            save_invstd, ab.as<P>());
  CHECK_LAUNCH();
  apply_kernel<T, P><<<tile_grid(c, apply_groups(rows, c)), dim3(32, 8), 0, s>>>(rows, c, x, ab.as<P>(), y);
  CHECK_LAUNCH();
}

template <class T, class P>
void batch_norm_backward(int64_t rows, int64_t c, const T* x, const T* gy, const P* gamma, const P* mean,
                        const P* invstd, bool training, T* gx, P* ggamma, P* gbeta, cudaStream_t s) {
  check_shape(rows, c, "batch_norm_backward");
  const int groups = detail::row_groups(rows, c);
  Workspace partial(sizeof(P) * 2 * static_cast<size_t>(groups) * static_cast<size_t>(c));
  Workspace sums(sizeof(P) * 2 * static_cast<size_t>(c));
  grad_partial_kernel<T, P><<<tile_grid(c, groups), dim3(32, 8), 0, s>>>(rows, c, x, gy, mean, invstd,
                                                                               partial.as<P>());
  CHECK_LAUNCH();
  grad_final_kernel<P><<<channel_blocks(c), kBlock, 0, s>>>(c, groups, partial.as<P>(), sums.as<P>(), ggamma, gbeta);
  CHECK_LAUNCH();
  if (gx) {
    grad_input_kernel<T, P><<<tile_grid(c, apply_groups(rows, c)), dim3(32, 8), 0, s>>>(
        rows, c, P(rows), x, gy, gamma, mean, invstd, sums.as<P>(), training, gx);
    CHECK_LAUNCH();
  }
}

template <class T, class P>
void batch_norm_sums(int64_t rows, int64_t c, const T* x, const P* center_sum, P total, P* out, cudaStream_t s) {
  check_shape(rows, c, "batch_norm_sums");
  const int groups = detail::row_groups(rows, c);
  Workspace partial(sizeof(P) * static_cast<size_t>(groups) * static_cast<size_t>(c));
  sums_partial_kernel<T, P><<<tile_grid(c, groups), dim3(32, 8), 0, s>>>(rows, c, x, center_sum, total,
                                                                         partial.as<P>());
  CHECK_LAUNCH();
  sums_final_kernel<P><<<channel_blocks(c), kBlock, 0, s>>>(c, groups, partial.as<P>(), out);
  CHECK_LAUNCH();
}

template <class T, class P>
void batch_norm_forward_from_sums(int64_t rows, int64_t c, int64_t total, const T* x, const P* sum, const P* sq,
                                  const P* gamma, const P* beta, P eps, P momentum, P* running_mean, P* running_var,
                                  P* save_mean, P* save_invstd, T* y, cudaStream_t s) {
  check_shape(rows, c, "batch_norm_forward_from_sums");
  Workspace ab(sizeof(P) * 2 * static_cast<size_t>(c));
  from_sums_final_kernel<P><<<channel_blocks(c), kBlock, 0, s>>>(c, total, sum, sq, gamma, beta, eps, momentum,
                                                                 running_mean, running_var, save_mean, save_invstd,
                                                                 ab.as<P>());
  CHECK_LAUNCH();
  apply_kernel<T, P><<<tile_grid(c, apply_groups(rows, c)), dim3(32, 8), 0, s>>>(rows, c, x, ab.as<P>(), y);
  CHECK_LAUNCH();
}

template <class T, class P>
void batch_norm_backward_sums(int64_t rows, int64_t c, const T* x, const T* gy, const P* mean, const P* invstd,
                              P* sums, cudaStream_t s) {
  check_shape(rows, c, "batch_norm_backward_sums");
  const int groups = detail::row_groups(rows, c);
  Workspace partial(sizeof(P) * 2 * static_cast<size_t>(groups) * static_cast<size_t>(c));
  grad_partial_kernel<T, P><<<tile_grid(c, groups), dim3(32, 8), 0, s>>>(rows, c, x, gy, mean, invstd,
                                                                               partial.as<P>());
  CHECK_LAUNCH();
  grad_final_kernel<P><<<channel_blocks(c), kBlock, 0, s>>>(c, groups, partial.as<P>(), sums, nullptr, nullptr);
  CHECK_LAUNCH();
}

template <class T, class P>
void batch_norm_backward_input(int64_t rows, int64_t c, P total, const T* x, const T* gy, const P* gamma,
                               const P* mean, const P* invstd, const P* sums, T* gx, cudaStream_t s) {
  check_shape(rows, c, "batch_norm_backward_input");
  grad_input_kernel<T, P><<<tile_grid(c, apply_groups(rows, c)), dim3(32, 8), 0, s>>>(
      rows, c, total, x, gy, gamma, mean, invstd, sums, true, gx);
  CHECK_LAUNCH();
}

#define ENGINE_CUDA_BN(T, P)                                                                                  \
  template void batch_norm_forward_train<T, P>(int64_t, int64_t, const T*, const P*, const P*, P, P, P*, P*, P*, \
                                              P*, T*, cudaStream_t);                                          \
  template void batch_norm_forward_eval<T, P>(int64_t, int64_t, const T*, const P*, const P*, P, const P*,       \
                                             const P*, P*, T*, cudaStream_t);                                 \
  template void batch_norm_backward<T, P>(int64_t, int64_t, const T*, const T*, const P*, const P*, const P*,    \
                                         bool, T*, P*, P*, cudaStream_t);                                     \
  template void batch_norm_sums<T, P>(int64_t, int64_t, const T*, const P*, P, P*, cudaStream_t);                \
  template void batch_norm_forward_from_sums<T, P>(int64_t, int64_t, int64_t, const T*, const P*, const P*,      \
                                                  const P*, const P*, P, P, P*, P*, P*, P*, T*, cudaStream_t); \
  template void batch_norm_backward_sums<T, P>(int64_t, int64_t, const T*, const T*, const P*, const P*, P*,     \
                                              cudaStream_t);                                                  \
  template void batch_norm_backward_input<T, P>(int64_t, int64_t, P, const T*, const T*, const P*, const P*,     \
                                               const P*, const P*, T*, cudaStream_t);
ENGINE_CUDA_BN(float, float)
ENGINE_CUDA_BN(double, double)
ENGINE_CUDA_BN(kernels::half, float)
ENGINE_CUDA_BN(kernels::bfloat16, float)
#undef ENGINE_CUDA_BN

}  // namespace kernels::cuda

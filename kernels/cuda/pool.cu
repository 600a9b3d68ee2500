// Pooling kernels: one thread per output (forward) or per input element (backward, as a
// gather: no atomics, deterministic, and exactly the CPU's summation order).
#include "kernels/cuda/pool.h"

#include <cuda_runtime.h>

#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using detail::grid_for;
using detail::kBlock;

namespace {

template <class T>
__global__ void __launch_bounds__(kBlock) maxpool_fwd_kernel(PoolShape d, int64_t oh, int64_t ow, const T* x, T* y,
                                                              uint8_t* argmax) {
  const int64_t total = d.n * oh * ow * d.c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    const int64_t ch = o % d.c;
    int64_t t = o / d.c;
    const int64_t j = t % ow;
    t /= ow;
    const int64_t i = t % oh;
    const int64_t b = t / oh;
    using A = acc_t<T>;  // FP32 for the training dtypes, FP64 for FP64: compare at full precision
    A best = -INFINITY;
    int best_at = -1;  // r * kernel + q, as on the CPU
    for (int64_t r = 0; r < d.kernel; ++r) {
      const int64_t ih = i * d.stride - d.pad + r;
      if (ih < 0 || ih >= d.h) continue;
      for (int64_t q = 0; q < d.kernel; ++q) {
        const int64_t iw = j * d.stride - d.pad + q;
        if (iw < 0 || iw >= d.w) continue;
        const A v = static_cast<A>(x[((b * d.h + ih) * d.w + iw) * d.c + ch]);
        // The CPU's rule: strictly greater keeps the first of equal values; a NaN wins and stays.
        const bool take = best_at < 0 || v > best || (v != v && best == best);
        if (take) {
          best = v;
          best_at = static_cast<int>(r * d.kernel + q);
        }
      }
    }
    // A window entirely in the padding cannot happen for pad <= kernel / 2 (the engine's rule).
    const int64_t ih = i * d.stride - d.pad + best_at / d.kernel, iw = j * d.stride - d.pad + best_at % d.kernel;
    y[o] = best_at >= 0 ? x[((b * d.h + ih) * d.w + iw) * d.c + ch] : from_acc<T>(acc_t<T>(0));
    argmax[o] = static_cast<uint8_t>(best_at);
  }
}

// Input element (b, ih, iw, ch) lies in output windows i in [ceil((ih + pad - k + 1) / s),
// floor((ih + pad) / s)] (clamped to [0, oh)), likewise j. Visiting them in (i, j) order is
// the CPU's order for this (b, ch), and rounding to T after each addition is its rounding.
template <class T>
__global__ void __launch_bounds__(kBlock) maxpool_bwd_kernel(PoolShape d, int64_t oh, int64_t ow, const T* gy,
                                                              const uint8_t* argmax, T* gx) {
  const int64_t total = d.n * d.h * d.w * d.c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t ch = e % d.c;
    int64_t t = e / d.c;
    const int64_t iw = t % d.w;
    t /= d.w;
    const int64_t ih = t % d.h;
    const int64_t b = t / d.h;
    const int64_t lo_i_num = ih + d.pad - d.kernel + 1, lo_j_num = iw + d.pad - d.kernel + 1;
    const int64_t i0 = lo_i_num <= 0 ? 0 : (lo_i_num + d.stride - 1) / d.stride;
    const int64_t j0 = lo_j_num <= 0 ? 0 : (lo_j_num + d.stride - 1) / d.stride;
    const int64_t i1 = min((ih + d.pad) / d.stride, oh - 1);
    const int64_t j1 = min((iw + d.pad) / d.stride, ow - 1);
    T acc = from_acc<T>(acc_t<T>(0));
    for (int64_t i = i0; i <= i1; ++i) {
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t o = ((b * oh + i) * ow + j) * d.c + ch;
        const int64_t me = (ih + d.pad - i * d.stride) * d.kernel + (iw + d.pad - j * d.stride);  // my place in window (i, j)
        if (argmax[o] == me) acc = from_acc<T>(acc_t<T>(acc) + acc_t<T>(gy[o]));
      }
    }
    gx[e] = acc;
  }
}

// One thread per (b, ch): consecutive threads read consecutive channels (coalesced).
template <class T>
__global__ void __launch_bounds__(kBlock) gap_fwd_kernel(int64_t n, int64_t hw, int64_t c, const T* x, T* y) {
  const int64_t total = n * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    const int64_t b = o / c, ch = o % c;
    acc_t<T> s = 0;
    for (int64_t p = 0; p < hw; ++p) s += acc_t<T>(x[(b * hw + p) * c + ch]);
    y[o] = from_acc<T>(s / acc_t<T>(hw));
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock) gap_bwd_kernel(int64_t n, int64_t hw, int64_t c, const T* gy, T* gx) {
  const int64_t total = n * hw * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t ch = e % c, b = e / (hw * c);
    gx[e] = from_acc<T>(acc_t<T>(gy[b * c + ch]) / acc_t<T>(hw));
  }
}

template <class T>
__global__ void __launch_bounds__(kBlock)
    gate_fwd_kernel(int64_t n, int64_t hw, int64_t c, const T* x, const T* g, T* y) {
  const int64_t total = n * hw * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t ch = e % c, b = e / (hw * c);
    y[e] = from_acc<T>(acc_t<T>(x[e]) * acc_t<T>(g[b * c + ch]));
  }
}

// One thread per (n, c): the sum over positions in order, as the CPU (neighbouring threads read
// neighbouring channels, so the loads coalesce).
template <class T>
__global__ void __launch_bounds__(kBlock)
    gate_bwd_kernel(int64_t n, int64_t hw, int64_t c, const T* x, const T* gy, T* gg) {
  const int64_t total = n * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t ch = e % c, b = e / c;
    acc_t<T> sum = 0;
    for (int64_t p = 0; p < hw; ++p) {
      const int64_t i = (b * hw + p) * c + ch;
      sum += acc_t<T>(gy[i]) * acc_t<T>(x[i]);
    }
    gg[e] = from_acc<T>(sum);
  }
}

void check_dims(const PoolShape& d, const char* op) {
  ENGINE_CHECK(d.n >= 0 && d.h > 0 && d.w > 0 && d.c > 0 && d.kernel > 0 && d.stride > 0 && d.pad >= 0 &&
                   d.pad * 2 <= d.kernel && d.out_h() > 0 && d.out_w() > 0,
               op << ": bad shape n=" << d.n << " h=" << d.h << " w=" << d.w << " c=" << d.c << " kernel=" << d.kernel
                  << " stride=" << d.stride << " pad=" << d.pad);
  ENGINE_CHECK(d.kernel <= kMaxPoolKernel, op << ": kernel " << d.kernel << " over " << kMaxPoolKernel
                                                << " (the window's argmax is one byte)");
}

}  // namespace

template <class T> void max_pool2d_forward(const PoolShape& d, const T* x, T* y, uint8_t* argmax, cudaStream_t s) {
  check_dims(d, "max_pool2d_forward");
  const int64_t oh = d.out_h(), ow = d.out_w(), total = d.n * oh * ow * d.c;
  if (total == 0) return;
  maxpool_fwd_kernel<T><<<grid_for(total), kBlock, 0, s>>>(d, oh, ow, x, y, argmax);
  CHECK_LAUNCH();
}

template <class T>
void max_pool2d_backward(const PoolShape& d, const T* gy, const uint8_t* argmax, T* gx, cudaStream_t s) {
  check_dims(d, "max_pool2d_backward");
  const int64_t total = d.n * d.h * d.w * d.c;
  if (total == 0) return;
  maxpool_bwd_kernel<T><<<grid_for(total), kBlock, 0, s>>>(d, d.out_h(), d.out_w(), gy, argmax, gx);
  CHECK_LAUNCH();
}

template <class T> void global_avg_pool_forward(int64_t n, int64_t hw, int64_t c, const T* x, T* y, cudaStream_t s) {
  ENGINE_CHECK(hw > 0 && c > 0 && n >= 0, "global_avg_pool_forward: bad shape n=" << n << " hw=" << hw << " c=" << c);
  if (n == 0) return;
  gap_fwd_kernel<T><<<grid_for(n * c), kBlock, 0, s>>>(n, hw, c, x, y);
  CHECK_LAUNCH();
}

template <class T>
void global_avg_pool_backward(int64_t n, int64_t hw, int64_t c, const T* gy, T* gx, cudaStream_t s) {
  ENGINE_CHECK(hw > 0 && c > 0 && n >= 0, "global_avg_pool_backward: bad shape n=" << n << " hw=" << hw << " c=" << c);
  if (n == 0) return;
  gap_bwd_kernel<T><<<grid_for(n * hw * c), kBlock, 0, s>>>(n, hw, c, gy, gx);
  CHECK_LAUNCH();
}

template <class T>
void channel_gate_forward(int64_t n, int64_t hw, int64_t c, const T* x, const T* g, T* y, cudaStream_t s) {
  ENGINE_CHECK(hw > 0 && c > 0 && n >= 0, "channel_gate_forward: bad shape n=" << n << " hw=" << hw << " c=" << c);
  if (n == 0) return;
  gate_fwd_kernel<T><<<grid_for(n * hw * c), kBlock, 0, s>>>(n, hw, c, x, g, y);
  CHECK_LAUNCH();
}

template <class T>
void channel_gate_backward_gate(int64_t n, int64_t hw, int64_t c, const T* x, const T* gy, T* gg, cudaStream_t s) {
  ENGINE_CHECK(hw > 0 && c > 0 && n >= 0,
               "channel_gate_backward_gate: bad shape n=" << n << " hw=" << hw << " c=" << c);
  if (n == 0) return;
  gate_bwd_kernel<T><<<grid_for(n * c), kBlock, 0, s>>>(n, hw, c, x, gy, gg);
  CHECK_LAUNCH();
}

#define ENGINE_CUDA_POOL(T)                                                                              \
  template void max_pool2d_forward<T>(const PoolShape&, const T*, T*, uint8_t*, cudaStream_t);             \
  template void max_pool2d_backward<T>(const PoolShape&, const T*, const uint8_t*, T*, cudaStream_t);      \
  template void global_avg_pool_forward<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);        \
  template void global_avg_pool_backward<T>(int64_t, int64_t, int64_t, const T*, T*, cudaStream_t);         \
  template void channel_gate_forward<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, cudaStream_t);    \
  template void channel_gate_backward_gate<T>(int64_t, int64_t, int64_t, const T*, const T*, T*, cudaStream_t);
ENGINE_CUDA_POOL(float)
ENGINE_CUDA_POOL(double)
ENGINE_CUDA_POOL(kernels::half)
ENGINE_CUDA_POOL(kernels::bfloat16)
#undef ENGINE_CUDA_POOL

}  // namespace kernels::cuda

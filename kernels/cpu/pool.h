// CPU reference pooling over NHWC tensors: max-pool (with each maximum's place in its window
// saved for backward, one byte) and global average pool. Max ties go to the first maximum in
// scan order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/scratch.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

namespace kernels::cpu {


namespace detail {
// The usual 2 x 2 pool (stride 2, no padding): the four taps of each output compared per channel
// by the general loop's rule, in its scan order, the winner's bits kept as they are (no gather);
// branch-free, so the channel loop vectorises (3x the general loop's speed on 16 channels).
template <class T> void max_pool2x2_forward(const PoolShape& s, const T* x, T* y, uint8_t* argmax) {
  using A = acc_t<T>;
  // 16-bit data selected as raw bits (the select of a struct would not vectorise).
  using Raw = std::conditional_t<sizeof(T) == 2, uint16_t, T>;
  const int64_t oh = s.out_h(), ow = s.out_w(), c = s.c;
  auto value = [](Raw r) -> A {
    if constexpr (sizeof(T) == 2) return static_cast<A>(load_simd(T::from_bits(r)));
    else return static_cast<A>(r);
  };
  const Raw* xr = reinterpret_cast<const Raw*>(x);
  Raw* yr = reinterpret_cast<Raw*>(y);
#pragma omp parallel for collapse(2) if (s.n * oh * ow * c > (1 << 15))
  for (int64_t b = 0; b < s.n; ++b)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t in0 = (b * s.h + 2 * i) * s.w + 2 * j;
        const Raw* tap[4] = {xr + in0 * c, xr + (in0 + 1) * c, xr + (in0 + s.w) * c, xr + (in0 + s.w + 1) * c};
        const uint8_t at[4] = {0, 1, 2, 3};  // r * 2 + q
        const int64_t o = ((b * oh + i) * ow + j) * c;
        for (int64_t ch = 0; ch < c; ++ch) {
          Raw bits = tap[0][ch];
          A best = value(bits);
          uint8_t where = at[0];
          for (int t = 1; t < 4; ++t) {
            const Raw tb = tap[t][ch];
            const A v = value(tb);
            const bool take = v > best || (v != v && best == best);  // as the general loop
            best = take ? v : best;
            bits = take ? tb : bits;
            where = take ? at[t] : where;
          }
          yr[o + ch] = bits;
          argmax[o + ch] = where;
        }
      }
}
}  // namespace detail

// argmax[i] = where output i's maximum lies in its window: r * kernel + q for the tap at row r,
// column q (kernel <= kMaxPoolKernel, so a byte holds it; an int32 image index would take 4).
template <class T> void max_pool2d_forward(const PoolShape& s, const T* x, T* y, uint8_t* argmax, Stream = nullptr) {
  if (s.kernel == 2 && s.stride == 2 && s.pad == 0 && s.h >= 2 && s.w >= 2)  // every window inside
    return detail::max_pool2x2_forward(s, x, y, argmax);
  const int64_t oh = s.out_h(), ow = s.out_w();
#pragma omp parallel if (s.n * oh > 16)
  {
    // Taps outer, channels inner: each tap is a contiguous run of c values, and the
    // comparison is a branch-free select per channel (random data would defeat a predictor).
    // Compared in acc_t<T>: FP32 for the training dtypes (exact for them), FP64 for FP64.
    using A = acc_t<T>;
    std::vector<A> best(static_cast<size_t>(s.c));
    std::vector<uint8_t> best_at(static_cast<size_t>(s.c));
#pragma omp for collapse(2)
    for (int64_t b = 0; b < s.n; ++b) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          bool first = true;
          for (int64_t r = 0; r < s.kernel; ++r) {
            const int64_t ih = i * s.stride - s.pad + r;
            if (ih < 0 || ih >= s.h) continue;
            for (int64_t q = 0; q < s.kernel; ++q) {
              const int64_t iw = j * s.stride - s.pad + q;
              if (iw < 0 || iw >= s.w) continue;
              const T* tap = x + ((b * s.h + ih) * s.w + iw) * s.c;
              const uint8_t at = static_cast<uint8_t>(r * s.kernel + q);
              if (first) {
                for (int64_t ch = 0; ch < s.c; ++ch) {
                  best[ch] = static_cast<A>(load_simd(tap[ch]));
                  best_at[ch] = at;
                }
                first = false;
                continue;
              }
              for (int64_t ch = 0; ch < s.c; ++ch) {
                const A v = static_cast<A>(load_simd(tap[ch]));
                // Strictly greater keeps the first of equal values; a NaN wins and stays.
                const bool take = v > best[ch] || (v != v && best[ch] == best[ch]);
                best[ch] = take ? v : best[ch];
                best_at[ch] = take ? at : best_at[ch];
              }
            }
          }
          const int64_t o = ((b * oh + i) * ow + j) * s.c;
          for (int64_t ch = 0; ch < s.c; ++ch) {
            const int64_t ih = i * s.stride - s.pad + best_at[ch] / s.kernel;
            const int64_t iw = j * s.stride - s.pad + best_at[ch] % s.kernel;
            y[o + ch] = x[((b * s.h + ih) * s.w + iw) * s.c + ch];
            argmax[o + ch] = best_at[ch];
          }
        }
      }
    }
  }
}

// gx is overwritten (as on the GPU): zeroed, then each output's gradient added at its argmax,
// outputs in order, so overlapping windows add in the order the GPU's gather adds them.
// Non-overlapping windows (stride = kernel, no padding: the usual 2x2 pool) take a gather
// instead: each input pixel lies in at most one window, so its gradient is that window's where
// it was the argmax and 0 elsewhere, written once with no zero fill (same values: 0 + g = g).
template <class T>
void max_pool2d_backward(const PoolShape& s, const T* gy, const uint8_t* argmax, T* gx, Stream = nullptr) {
  const int64_t per_image_out = s.out_h() * s.out_w() * s.c;
  const int64_t per_image_in = s.h * s.w * s.c;
  if (s.stride == s.kernel && s.pad == 0) {
    const int64_t oh = s.out_h(), ow = s.out_w();
    // Moved as bits (all-zero bits are +0.0 in every float type): a select on integers
    // vectorises where one on half or bfloat16 structs would not.
    using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
    static_assert(sizeof(Bits) == sizeof(T));
    const Bits* g = reinterpret_cast<const Bits*>(gy);
#pragma omp parallel for collapse(2) if (s.n * s.h > 8)
    for (int64_t b = 0; b < s.n; ++b) {
      for (int64_t ih = 0; ih < s.h; ++ih) {
        const int64_t i = ih / s.kernel;
        for (int64_t iw = 0; iw < s.w; ++iw) {
          const int64_t j = iw / s.kernel;
          Bits* dst = reinterpret_cast<Bits*>(gx) + ((b * s.h + ih) * s.w + iw) * s.c;
          if (i >= oh || j >= ow) {  // rows and columns no window covers
            std::fill(dst, dst + s.c, Bits(0));
            continue;
          }
          const int64_t o = ((b * oh + i) * ow + j) * s.c;
          const uint8_t at = static_cast<uint8_t>((ih - i * s.kernel) * s.kernel + (iw - j * s.kernel));
          for (int64_t ch = 0; ch < s.c; ++ch) dst[ch] = argmax[o + ch] == at ? g[o + ch] : Bits(0);
        }
      }
    }
    return;
  }
#pragma omp parallel for if (s.n > 1)
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t i = 0; i < per_image_in; ++i) gx[b * per_image_in + i] = from_acc<T>(acc_t<T>(0));
    for (int64_t o = 0; o < per_image_out; ++o) {
      const int64_t ch = o % s.c, j = (o / s.c) % s.out_w(), i = o / (s.c * s.out_w());
      const uint8_t at = argmax[b * per_image_out + o];
      const int64_t ih = i * s.stride - s.pad + at / s.kernel, iw = j * s.stride - s.pad + at % s.kernel;
      T& dst = gx[b * per_image_in + (ih * s.w + iw) * s.c + ch];
      dst = from_acc<T>(acc_t<T>(dst) + acc_t<T>(gy[b * per_image_out + o]));
    }
  }
}

// y[n, c] = mean over h, w of x[n, h, w, c], accumulated in acc_t<T>.
template <class T> void global_avg_pool_forward(int64_t n, int64_t hw, int64_t c, const T* x, T* y, Stream = nullptr) {
#pragma omp parallel for if (n > 1)
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t ch = 0; ch < c; ++ch) {
      acc_t<T> sum = 0;
      for (int64_t p = 0; p < hw; ++p) sum += acc_t<T>(x[(b * hw + p) * c + ch]);
      y[b * c + ch] = from_acc<T>(sum / acc_t<T>(hw));
    }
  }
}

template <class T>
void global_avg_pool_backward(int64_t n, int64_t hw, int64_t c, const T* gy, T* gx, Stream = nullptr) {
#pragma omp parallel for if (n > 1)
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch)
        gx[(b * hw + p) * c + ch] = from_acc<T>(acc_t<T>(gy[b * c + ch]) / acc_t<T>(hw));
  }
}

// Channel gate (squeeze-and-excitation's rescale): y[n, p, c] = x[n, p, c] * g[n, c] over the
// hw positions p, one rounding per element; the same call gives gx from gy. The gate's
// gradient gg[n, c] = sum over p of gy * x, accumulated in acc_t<T>.
template <class T>
void channel_gate_forward(int64_t n, int64_t hw, int64_t c, const T* x, const T* g, T* y, Stream = nullptr) {
#pragma omp parallel for if (n * hw * c > (1 << 15))
  for (int64_t b = 0; b < n; ++b)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t i = (b * hw + p) * c + ch;
        y[i] = from_acc<T>(acc_t<T>(x[i]) * acc_t<T>(g[b * c + ch]));
      }
}

template <class T>
void channel_gate_backward_gate(int64_t n, int64_t hw, int64_t c, const T* x, const T* gy, T* gg, Stream = nullptr) {
#pragma omp parallel for if (n > 1)
  for (int64_t b = 0; b < n; ++b) {
    acc_t<T>* sum = scratch<acc_t<T>>(0, c);  // this thread's
    std::fill(sum, sum + c, acc_t<T>(0));
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch) {
        const int64_t i = (b * hw + p) * c + ch;
        sum[ch] += acc_t<T>(gy[i]) * acc_t<T>(x[i]);
      }
    for (int64_t ch = 0; ch < c; ++ch) gg[b * c + ch] = from_acc<T>(sum[ch]);
  }
}

}  // namespace kernels::cpu

// CPU reference 2-D convolution: activations NHWC, filters KRSC (out, kh, kw, in).
// Where it fits, conv2d_* take the implicit GEMM of conv_implicit.h (no column matrix). Else
// im2col turns each output pixel's receptive field into one contiguous row (in NHWC each
// (r, s) tap is a contiguous run of C values), then one GEMM per chunk of whole images.
// Arithmetic is in A = acc_t<T>: FP16/BF16 data is widened once and rounded once. BF16 data
// goes to the tile kernels instead (bf16_tiles.h) where the CPU has a BF16 dot-product unit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/conv_implicit.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/convert.h"
#include "kernels/error.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

namespace kernels::cpu {


namespace detail {

// How many images one im2col chunk holds: about 8 MB of column buffer, at least one image.
inline int64_t images_per_chunk(const ConvShape& sh) {
  const int64_t per_image = sh.out_h() * sh.out_w() * sh.patch();
  return std::max<int64_t>(1, (int64_t(1) << 21) / std::max<int64_t>(1, per_image));
}

// col[(b*OH + i)*OW + j][(r*S + s)*C + c] = x[b, i*stride - pad + r, j*stride - pad + s, c] or 0.
// For one kernel row r the taps s = 0..S-1 read consecutive input pixels, and NHWC keeps their
// channels together, so the in-bounds taps are one contiguous run of up to S*C values: one copy
// (or one widening loop) per kernel row, zeros for the taps over the border.
template <class T, class A>
void im2col(const ConvShape& sh, const T* x, int64_t b0, int64_t nb, A* col) {
  const int64_t oh = sh.out_h(), ow = sh.out_w(), patch = sh.patch();
#pragma omp parallel for collapse(2) if (nb * oh > 8)
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        A* row = col + ((b * oh + i) * ow + j) * patch;
        const int64_t iw0 = j * sh.stride - sh.pad;  // input column of tap s = 0
        const int64_t s_lo = std::max<int64_t>(0, -iw0), s_hi = std::min<int64_t>(sh.s, sh.w - iw0);
        for (int64_t r = 0; r < sh.r; ++r) {
          const int64_t ih = i * sh.stride - sh.pad + r;
          A* dst = row + r * sh.s * sh.c;
          if (ih < 0 || ih >= sh.h || s_lo >= s_hi) {
            std::fill(dst, dst + sh.s * sh.c, A(0));
            continue;
          }
          std::fill(dst, dst + s_lo * sh.c, A(0));
          std::fill(dst + s_hi * sh.c, dst + sh.s * sh.c, A(0));
          const T* src = x + (((b0 + b) * sh.h + ih) * sh.w + iw0 + s_lo) * sh.c;
          const int64_t run = (s_hi - s_lo) * sh.c;
          A* out = dst + s_lo * sh.c;
          if constexpr (std::is_same_v<T, A>) {
            std::memcpy(out, src, sizeof(A) * run);
          } else if (run >= 8) {  // long enough to vectorise: the branch-free conversion
            for (int64_t e = 0; e < run; ++e) out[e] = static_cast<A>(load_simd(src[e]));
          } else {  // a few values: one F16C instruction each beats it
            for (int64_t e = 0; e < run; ++e) out[e] = convert<A>(src[e]);
          }
        }
      }
    }
  }
}

// The adjoint of im2col: adds each column entry back into its input pixel. Images are
// independent, so threads split by image and never write the same pixel.
template <class A>
void col2im_add(const ConvShape& sh, const A* col, int64_t b0, int64_t nb, A* gx) {
  const int64_t oh = sh.out_h(), ow = sh.out_w(), patch = sh.patch();
#pragma omp parallel for if (nb > 1)
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        const A* row = col + ((b * oh + i) * ow + j) * patch;
        for (int64_t r = 0; r < sh.r; ++r) {
          const int64_t ih = i * sh.stride - sh.pad + r;
          if (ih < 0 || ih >= sh.h) continue;
          for (int64_t s = 0; s < sh.s; ++s) {
            const int64_t iw = j * sh.stride - sh.pad + s;
            if (iw < 0 || iw >= sh.w) continue;
            const A* src = row + (r * sh.s + s) * sh.c;
            A* dst = gx + (((b0 + b) * sh.h + ih) * sh.w + iw) * sh.c;
            for (int64_t ch = 0; ch < sh.c; ++ch) dst[ch] += src[ch];
          }
        }
      }
    }
  }
}

// A widened copy of a T buffer in scratch slot `slot` (or the buffer itself when T is A).
template <class A, class T>
const A* widen(const T* p, int64_t n, int slot) {
  if constexpr (std::is_same_v<T, A>) {
    return p;
  } else {
    A* w = scratch<A>(slot, n);
    convert_array(p, w, n);
    return w;
  }
}

// im2col of 16-bit data: the chunk's images are widened first, in one parallel pass over a
// contiguous array (scratch slot `slot`), and the columns are then copied as floats: cheaper
// than converting the same pixels once per tap that reads them (R*S times).
template <class A, class T>
void im2col_widened(const ConvShape& sh, const T* x, int64_t b0, int64_t nb, A* col, int slot) {
  if constexpr (std::is_same_v<T, A>) {
    im2col(sh, x, b0, nb, col);
  } else {
    const int64_t per_image = sh.h * sh.w * sh.c;
    const A* xa = widen<A>(x + b0 * per_image, nb * per_image, slot);
    im2col(sh, xa, 0, nb, col);
  }
}

}  // namespace detail

// y[N,OH,OW,K] = conv(x, w) + bias (bias may be null); one group (the im2col + GEMM path).
template <class T>
void conv2d_forward_dense(const ConvShape& sh, const T* x, const T* w, const T* bias, T* y) {
  using A = acc_t<T>;
  const int64_t rows_per_image = sh.out_h() * sh.out_w(), patch = sh.patch();
  // Scratch slots: 0 widened weights, 1 widened bias, 2 column matrix, 3 FP32 output, 4 widened x.
  const A* wa = detail::widen<A>(w, sh.k * patch, 0);
  const A* ba = bias ? detail::widen<A>(bias, sh.k, 1) : nullptr;
  const int64_t chunk = detail::images_per_chunk(sh);
  const bool direct = sh.pointwise() && std::is_same_v<T, A>;  // x is already the im2col matrix
  for (int64_t b0 = 0; b0 < sh.n; b0 += chunk) {
    const int64_t nb = std::min(chunk, sh.n - b0), rows = nb * rows_per_image;
    const A* a;
    if (direct) {
      a = reinterpret_cast<const A*>(x) + b0 * rows_per_image * sh.c;
    } else {
      A* col = scratch<A>(2, rows * patch);
      detail::im2col_widened<A>(sh, x, b0, nb, col, 4);
      a = col;
    }
    A* dst;
    if constexpr (std::is_same_v<T, A>) {
      dst = y + b0 * rows_per_image * sh.k;
    } else {
      dst = scratch<A>(3, rows * sh.k);
    }
    gemm<A>(Trans::N, Trans::T, rows, sh.k, patch, 1.0f, a, patch, wa, patch, 0.0f, dst, sh.k);
    T* yc = y + b0 * rows_per_image * sh.k;
    if constexpr (std::is_same_v<T, half>) {  // bias added in FP32, then one F16C narrowing pass
      if (ba) {
#pragma omp parallel for if (rows * sh.k > (1 << 15))
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t o = 0; o < sh.k; ++o) dst[i * sh.k + o] += ba[o];
      }
      convert_array(dst, yc, rows * sh.k);
      continue;
    }
#pragma omp parallel for if (rows * sh.k > (1 << 15))
    for (int64_t i = 0; i < rows; ++i) {
      // The bias test hoisted out of the inner loop, so that loop vectorises.
      if (ba) {
        for (int64_t o = 0; o < sh.k; ++o) yc[i * sh.k + o] = store_simd<T>(dst[i * sh.k + o] + ba[o]);
      } else {
        for (int64_t o = 0; o < sh.k; ++o) yc[i * sh.k + o] = store_simd<T>(dst[i * sh.k + o]);
      }
    }
  }
}

// gx = conv-transpose(gy, w): the gradient with respect to the input (one group).
template <class T>
void conv2d_backward_data_dense(const ConvShape& sh, const T* gy, const T* w, T* gx) {
  using A = acc_t<T>;
  const int64_t rows_per_image = sh.out_h() * sh.out_w(), patch = sh.patch();
  const int64_t in_elems = sh.n * sh.h * sh.w * sh.c;
  // Scratch slots: 0 widened weights, 1 widened gy, 2 column gradient, 3 FP32 input gradient.
  const A* wa = detail::widen<A>(w, sh.k * patch, 0);
  A* gxa;
  if constexpr (std::is_same_v<T, A>) gxa = gx;
  else gxa = scratch<A>(3, in_elems);
  const int64_t chunk = detail::images_per_chunk(sh);
  for (int64_t b0 = 0; b0 < sh.n; b0 += chunk) {
    const int64_t nb = std::min(chunk, sh.n - b0), rows = nb * rows_per_image;
    const A* gya = detail::widen<A>(gy + b0 * rows_per_image * sh.k, rows * sh.k, 1);
    if (sh.pointwise()) {  // the input gradient is the column gradient itself
      gemm<A>(Trans::N, Trans::N, rows, sh.c, sh.k, 1.0f, gya, sh.k, wa, patch, 0.0f,
              gxa + b0 * rows_per_image * sh.c, sh.c);
      continue;
    }
    A* col = scratch<A>(2, rows * patch);
    gemm<A>(Trans::N, Trans::N, rows, patch, sh.k, 1.0f, gya, sh.k, wa, patch, 0.0f, col, patch);
    A* gx_chunk = gxa + b0 * sh.h * sh.w * sh.c;
    std::fill(gx_chunk, gx_chunk + nb * sh.h * sh.w * sh.c, A(0));
    detail::col2im_add(sh, col, b0, nb, gxa);
  }
  if constexpr (!std::is_same_v<T, A>) convert_array(gxa, gx, in_elems);
}

// gw[K, R*S*C] = sum over output pixels of gy^T * im2col(x); gbias[K] = sum of gy (if non-null).
// The sums over all chunks stay in A and are rounded to T once (one group).
template <class T>
void conv2d_backward_filter_dense(const ConvShape& sh, const T* x, const T* gy, T* gw, T* gbias) {
  using A = acc_t<T>;
  const int64_t rows_per_image = sh.out_h() * sh.out_w(), patch = sh.patch();
  // Scratch slots: 0 widened x, 1 widened gy, 2 column matrix, 4 FP32 weight gradient, 5 FP32 bias gradient.
  A* gwa = scratch<A>(4, sh.k * patch);
  A* gba = scratch<A>(5, sh.k);
  std::fill(gwa, gwa + sh.k * patch, A(0));
  std::fill(gba, gba + sh.k, A(0));
  const int64_t chunk = detail::images_per_chunk(sh);
  const bool direct = sh.pointwise() && std::is_same_v<T, A>;
  for (int64_t b0 = 0; b0 < sh.n; b0 += chunk) {
    const int64_t nb = std::min(chunk, sh.n - b0), rows = nb * rows_per_image;
    const A* gya = detail::widen<A>(gy + b0 * rows_per_image * sh.k, rows * sh.k, 1);
    const A* a;
    if (direct) {
      a = reinterpret_cast<const A*>(x) + b0 * rows_per_image * sh.c;
    } else {
      A* col = scratch<A>(2, rows * patch);
      detail::im2col_widened<A>(sh, x, b0, nb, col, 0);
      a = col;
    }
    gemm<A>(Trans::T, Trans::N, sh.k, patch, rows, 1.0f, gya, sh.k, a, patch, 1.0f, gwa, patch);
    if (gbias)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t o = 0; o < sh.k; ++o) gba[o] += gya[i * sh.k + o];
  }
  for (int64_t i = 0; i < sh.k * patch; ++i) gw[i] = store_simd<T>(gwa[i]);
  if (gbias)
    for (int64_t o = 0; o < sh.k; ++o) gbias[o] = from_acc<T>(gba[o]);
}

// ---- grouped and depthwise convolution --------------------------------------------------------
// Depthwise (one filter per channel) runs direct loops with the channel innermost: NHWC puts
// the channels of a pixel side by side, so each tap is one vector multiply-add over C, with
// no GEMM of one row. Other group counts gather each group's channels into a contiguous
// tensor and run the dense im2col + GEMM path per group: real GEMMs of C/groups columns.
namespace detail {

// The weights [C, R, S, 1] widened and transposed to [R, S, C] in scratch slot 0, so a tap's
// filters are contiguous. (The depthwise loops use slots 0 and 2-5 and call no other kernel.)
template <class A, class T> const A* depthwise_taps(const ConvShape& sh, const T* w) {
  A* t = scratch<A>(0, sh.r * sh.s * sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch)
    for (int64_t rs = 0; rs < sh.r * sh.s; ++rs) t[rs * sh.c + ch] = A(w[ch * sh.r * sh.s + rs]);
  return t;
}

// Visits every (output pixel, tap) pair of image b whose input pixel is inside the image.
template <class Visit> void for_taps(const ConvShape& sh, int64_t b, Visit visit) {
  const int64_t oh = sh.out_h(), ow = sh.out_w();
  for (int64_t oy = 0; oy < oh; ++oy)
    for (int64_t ox = 0; ox < ow; ++ox)
      for (int64_t r = 0; r < sh.r; ++r) {
        const int64_t iy = oy * sh.stride - sh.pad + r;
        if (iy < 0 || iy >= sh.h) continue;
        for (int64_t q = 0; q < sh.s; ++q) {
          const int64_t ix = ox * sh.stride - sh.pad + q;
          if (ix < 0 || ix >= sh.w) continue;
          visit(((b * oh + oy) * ow + ox) * sh.c, ((b * sh.h + iy) * sh.w + ix) * sh.c, r * sh.s + q);
        }
      }
}

// Group g's channels [g * width, (g + 1) * width) of rows x [rows, channels] <-> dense [rows, width].
template <class T> void gather_group(const T* x, int64_t rows, int64_t channels, int64_t width, int64_t g, T* out) {
#pragma omp parallel for if (rows * width > (1 << 15))
  for (int64_t i = 0; i < rows; ++i) std::copy(x + i * channels + g * width, x + i * channels + (g + 1) * width, out + i * width);
}
template <class T> void scatter_group(const T* in, int64_t rows, int64_t channels, int64_t width, int64_t g, T* x) {
#pragma omp parallel for if (rows * width > (1 << 15))
  for (int64_t i = 0; i < rows; ++i) std::copy(in + i * width, in + (i + 1) * width, x + i * channels + g * width);
}

inline ConvShape group_shape(const ConvShape& sh) {
  ConvShape g = sh;
  g.c = sh.group_c();
  g.k = sh.group_k();
  g.groups = 1;
  return g;
}

}  // namespace detail

// One group: BF16 on the tiles (AMX or AVX512-BF16) where the CPU has them, else the implicit
// GEMM (conv_implicit.h) where it fits, FP64 and other shapes through im2col + GEMM.
// ep: Epilogue::Relu applies ReLU to the result, in the tile kernels' store, else in one pass after.
template <class T>
void conv2d_forward(const ConvShape& sh, const T* x, const T* w, const T* bias, T* y, Stream stream = nullptr,
                    Epilogue ep = Epilogue::None) {
  ENGINE_CHECK(ep == Epilogue::None || ep == Epilogue::Relu, "conv2d_forward: the CPU fuses ReLU only");
  if constexpr (std::is_same_v<T, bfloat16>) {
    TileUnit unit;
    if (tile_conv_worth_it(sh) && bf16_tile_unit(&unit))
      return conv2d_forward_bf16_tiles(unit, sh, x, w, bias, y, TileRoute::Auto, ep == Epilogue::Relu);
  }
  if (ep == Epilogue::Relu) {
    conv2d_forward(sh, x, w, bias, y, stream);
    return relu_forward(y, y, sh.n * sh.out_h() * sh.out_w() * sh.k);
  }
  if constexpr (!std::is_same_v<T, double>)
    if (implicit_forward_fits(sh)) return conv2d_forward_implicit(sh, x, w, bias, y);
  if (sh.groups == 1) return conv2d_forward_dense(sh, x, w, bias, y);
  using A = acc_t<T>;
  if (sh.depthwise()) {
    const A* taps = detail::depthwise_taps<A>(sh, w);
    const int64_t pixels = sh.out_h() * sh.out_w();
#pragma omp parallel for if (sh.n > 1)
    for (int64_t b = 0; b < sh.n; ++b) {
      A* acc = scratch<A>(2, pixels * sh.c);  // this thread's
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t ch = 0; ch < sh.c; ++ch) acc[p * sh.c + ch] = bias ? A(bias[ch]) : A(0);
      const int64_t base = b * pixels * sh.c;
      detail::for_taps(sh, b, [&](int64_t yo, int64_t xo, int64_t tap) {
        A* a = acc + (yo - base);
        const T* xi = x + xo;
        const A* t = taps + tap * sh.c;
        for (int64_t ch = 0; ch < sh.c; ++ch) a[ch] += load_simd(xi[ch]) * t[ch];
      });
      for (int64_t i = 0; i < pixels * sh.c; ++i) y[base + i] = store_simd<T>(acc[i]);
    }
    return;
  }
  const ConvShape g = detail::group_shape(sh);
  const int64_t in_rows = sh.n * sh.h * sh.w, out_rows = sh.n * sh.out_h() * sh.out_w();
  std::vector<T> xg(static_cast<size_t>(in_rows * g.c)), yg(static_cast<size_t>(out_rows * g.k));
  for (int64_t k = 0; k < sh.groups; ++k) {
    detail::gather_group(x, in_rows, sh.c, g.c, k, xg.data());
    conv2d_forward_dense(g, xg.data(), w + k * g.k * g.patch(), bias ? bias + k * g.k : nullptr, yg.data());
    detail::scatter_group(yg.data(), out_rows, sh.k, g.k, k, y);
  }
}

template <class T>
void conv2d_backward_data(const ConvShape& sh, const T* gy, const T* w, T* gx, Stream = nullptr) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    TileUnit unit;
    if (tile_conv_worth_it(sh) && bf16_tile_unit(&unit))
      return conv2d_backward_data_bf16_tiles(unit, sh, gy, w, gx);
  }
  if constexpr (!std::is_same_v<T, double>)
    if (implicit_backward_data_fits(sh)) return conv2d_backward_data_implicit(sh, gy, w, gx);
  if (sh.groups == 1) return conv2d_backward_data_dense(sh, gy, w, gx);
  using A = acc_t<T>;
  if (sh.depthwise()) {
    const A* taps = detail::depthwise_taps<A>(sh, w);
    const int64_t image = sh.h * sh.w * sh.c;
#pragma omp parallel for if (sh.n > 1)
    for (int64_t b = 0; b < sh.n; ++b) {
      A* acc = scratch<A>(2, image);  // this thread's
      std::fill(acc, acc + image, A(0));
      detail::for_taps(sh, b, [&](int64_t yo, int64_t xo, int64_t tap) {
        A* a = acc + (xo - b * image);
        const T* g = gy + yo;
        const A* t = taps + tap * sh.c;
        for (int64_t ch = 0; ch < sh.c; ++ch) a[ch] += load_simd(g[ch]) * t[ch];
      });
      for (int64_t i = 0; i < image; ++i) gx[b * image + i] = store_simd<T>(acc[i]);
    }
    return;
  }
  const ConvShape g = detail::group_shape(sh);
  const int64_t in_rows = sh.n * sh.h * sh.w, out_rows = sh.n * sh.out_h() * sh.out_w();
  std::vector<T> gyg(static_cast<size_t>(out_rows * g.k)), gxg(static_cast<size_t>(in_rows * g.c));
  for (int64_t k = 0; k < sh.groups; ++k) {
    detail::gather_group(gy, out_rows, sh.k, g.k, k, gyg.data());
    conv2d_backward_data_dense(g, gyg.data(), w + k * g.k * g.patch(), gxg.data());
    detail::scatter_group(gxg.data(), in_rows, sh.c, g.c, k, gx);
  }
}

// Depthwise: per block of images a partial [R, S, C] sum, the blocks added in order, so the
// result does not depend on the thread count (as the dense path's chunks).
template <class T>
void conv2d_backward_filter(const ConvShape& sh, const T* x, const T* gy, T* gw, T* gbias, Stream = nullptr) {
  if constexpr (std::is_same_v<T, bfloat16>) {
    TileUnit unit;
    if (tile_conv_worth_it(sh) && bf16_tile_unit(&unit))
      return conv2d_backward_filter_bf16_tiles(unit, sh, x, gy, gw, gbias);
  }
  if constexpr (!std::is_same_v<T, double>)
    if (implicit_backward_filter_fits(sh)) return conv2d_backward_filter_implicit(sh, x, gy, gw, gbias);
  if (sh.groups == 1) return conv2d_backward_filter_dense(sh, x, gy, gw, gbias);
  using A = acc_t<T>;
  if (sh.depthwise()) {
    const int64_t taps = sh.r * sh.s, width = (taps + 1) * sh.c;  // + the bias sums
    const int64_t per_block = 4, blocks = (sh.n + per_block - 1) / per_block;
    A* part = scratch<A>(4, blocks * width);
    std::fill(part, part + blocks * width, A(0));
    const int64_t pixels = sh.out_h() * sh.out_w();
#pragma omp parallel for if (blocks > 1)
    for (int64_t bl = 0; bl < blocks; ++bl) {
      A* acc = part + bl * width;
      for (int64_t b = bl * per_block; b < std::min(sh.n, (bl + 1) * per_block); ++b) {
        detail::for_taps(sh, b, [&](int64_t yo, int64_t xo, int64_t tap) {
          A* a = acc + tap * sh.c;
          const T *g = gy + yo, *xi = x + xo;
          for (int64_t ch = 0; ch < sh.c; ++ch) a[ch] += load_simd(g[ch]) * load_simd(xi[ch]);
        });
        if (gbias)
          for (int64_t p = 0; p < pixels; ++p)
            for (int64_t ch = 0; ch < sh.c; ++ch) acc[taps * sh.c + ch] += load_simd(gy[(b * pixels + p) * sh.c + ch]);
      }
    }
    A* sum = scratch<A>(5, width);
    std::fill(sum, sum + width, A(0));
    for (int64_t bl = 0; bl < blocks; ++bl)
      for (int64_t j = 0; j < width; ++j) sum[j] += part[bl * width + j];
    for (int64_t ch = 0; ch < sh.c; ++ch)
      for (int64_t t = 0; t < taps; ++t) gw[ch * taps + t] = from_acc<T>(sum[t * sh.c + ch]);
    if (gbias)
      for (int64_t ch = 0; ch < sh.c; ++ch) gbias[ch] = from_acc<T>(sum[taps * sh.c + ch]);
    return;
  }
  const ConvShape g = detail::group_shape(sh);
  const int64_t in_rows = sh.n * sh.h * sh.w, out_rows = sh.n * sh.out_h() * sh.out_w();
  std::vector<T> xg(static_cast<size_t>(in_rows * g.c)), gyg(static_cast<size_t>(out_rows * g.k));
  for (int64_t k = 0; k < sh.groups; ++k) {
    detail::gather_group(x, in_rows, sh.c, g.c, k, xg.data());
    detail::gather_group(gy, out_rows, sh.k, g.k, k, gyg.data());
    conv2d_backward_filter_dense(g, xg.data(), gyg.data(), gw + k * g.k * g.patch(), gbias ? gbias + k * g.k : nullptr);
  }
}

}  // namespace kernels::cpu

// Implicit-GEMM convolution on the CPU: register-tiled micro-kernels whose A operand is the
// zero-padded NHWC input itself. In a padded image every tap is in bounds, so kernel row r of
// an output pixel's receptive field is one contiguous run of S*C floats, at a fixed distance
// (stride*C) from its neighbour's: no column matrix is built, copied or rebuilt for backward.
#include "kernels/cpu/simd.h"  // first: it brings in immintrin.h with a warning silenced

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>

#include "kernels/convert.h"
#include "kernels/cpu/conv_implicit.h"
#include "kernels/cpu/scratch.h"

namespace kernels::cpu {
namespace {

using V = simd::VecF;
using Reg = V::R;
constexpr int W = V::W;

// The largest tile (MR pixels or reduction indices) per panel width NV vectors: MR x NV
// accumulators, NV weight or gradient vectors, NV bias sums and one broadcast fit the
// register file.
#if defined(__AVX512F__)
constexpr int kMaxMR1 = 16, kMaxMR2 = 12;  // 32 registers: 19 and 29
#else
constexpr int kMaxMR1 = 8, kMaxMR2 = 5;  // 16 registers: 11 and 15
#endif

// Output channels per panel: two vectors when they divide the channels (more FMAs per
// broadcast), else one.
int panel_vectors(int64_t channels) { return (channels / W) % 2 == 0 ? 2 : 1; }
int max_tile(int nv) { return nv == 2 ? kMaxMR2 : kMaxMR1; }

// n split into ceil(n / cap) tiles of nearly equal size (the first n % count one larger).
struct Tile {
  int64_t start;
  int size;
};
struct Tiles {
  int64_t count, base, extra;
  Tiles(int64_t n, int cap) : count((n + cap - 1) / cap), base(n / count), extra(n % count) {}
  Tile operator[](int64_t t) const {
    return {t * base + std::min(t, extra), static_cast<int>(base + (t < extra ? 1 : 0))};
  }
};

// ---- Micro-kernels ------------------------------------------------------------------------

// Forward tile, MR output pixels of one output row by NR = NV*W output channels:
//   out[i][lane] = init[lane] + sum over r < rows, e < run of x[r*row_pitch + i*step + e] * b[lane]
// where b advances by NR per (r, e). x is the padded input at pixel 0's receptive-field corner,
// step the distance between neighbouring pixels' corners, b the packed weight panel.
template <int MR, int NV>
void forward_tile(const float* x, int64_t step, int64_t row_pitch, int64_t rows, int64_t run, const float* b,
                  const float* init, float* out, int64_t ldo) {
  Reg acc[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) acc[i][j] = init ? V::loadu(init + j * W) : V::zero();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * row_pitch;
    for (int64_t e = 0; e < run; ++e, b += NV * W) {
      Reg bv[NV];
#pragma GCC unroll 2
      for (int j = 0; j < NV; ++j) bv[j] = V::load(b + j * W);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const Reg av = V::set1(xr[i * step + e]);
#pragma GCC unroll 2
        for (int j = 0; j < NV; ++j) acc[i][j] = V::fma(av, bv[j], acc[i][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) V::storeu(out + i * ldo + j * W, acc[i][j]);
}

// Filter-gradient tile, MR consecutive reduction indices by NR output channels, summed over
// `rows` x `cols` output pixels:
//   part[i*ldp + lane] (+)= sum over pixels p of x_p[i] * g_p[lane];  bias[lane] (+)= sum of g_p[lane]
// x_p advances by step per pixel and row_step per row; g_p by ldg per pixel (gy rows are
// contiguous). first: start from zero instead of adding to part (and bias).
template <int MR, int NV, bool kBias>
void filter_tile(const float* x, int64_t step, int64_t row_step, int64_t rows, int64_t cols, const float* g,
                 int64_t ldg, float* part, int64_t ldp, float* bias, bool first) {
  Reg acc[MR][NV], bacc[NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) acc[i][j] = first ? V::zero() : V::loadu(part + i * ldp + j * W);
#pragma GCC unroll 2
  for (int j = 0; j < NV; ++j) bacc[j] = !kBias || first ? V::zero() : V::loadu(bias + j * W);
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t c = 0; c < cols; ++c) {
      const float* xp = x + row * row_step + c * step;  // indexed, never stepped past the end
      const float* gp = g + (row * cols + c) * ldg;
      Reg gv[NV];
#pragma GCC unroll 2
      for (int j = 0; j < NV; ++j) {
        gv[j] = V::loadu(gp + j * W);
        if constexpr (kBias) bacc[j] = V::add(bacc[j], gv[j]);
      }
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        const Reg av = V::set1(xp[i]);
#pragma GCC unroll 2
        for (int j = 0; j < NV; ++j) acc[i][j] = V::fma(av, gv[j], acc[i][j]);
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) V::storeu(part + i * ldp + j * W, acc[i][j]);
  if constexpr (kBias)
#pragma GCC unroll 2
    for (int j = 0; j < NV; ++j) V::storeu(bias + j * W, bacc[j]);
}

// The tile sizes are template arguments (the accumulators must be registers): tables of
// every instantiation from 1 to the cap, indexed by the runtime size.
using ForwardFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, const float*, const float*, float*,
                           int64_t);
using FilterFn = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, const float*, int64_t, float*, int64_t,
                          float*, bool);

template <int NV, int... M>
constexpr std::array<ForwardFn, sizeof...(M)> forward_table(std::integer_sequence<int, M...>) {
  return {&forward_tile<M + 1, NV>...};
}
template <int NV, bool kBias, int... M>
constexpr std::array<FilterFn, sizeof...(M)> filter_table(std::integer_sequence<int, M...>) {
  return {&filter_tile<M + 1, NV, kBias>...};
}

ForwardFn forward_fn(int nv, int mr) {
  static constexpr auto one = forward_table<1>(std::make_integer_sequence<int, kMaxMR1>());
  static constexpr auto two = forward_table<2>(std::make_integer_sequence<int, kMaxMR2>());
  return nv == 2 ? two[mr - 1] : one[mr - 1];
}
FilterFn filter_fn(int nv, int mr, bool bias) {
  static constexpr auto one = filter_table<1, false>(std::make_integer_sequence<int, kMaxMR1>());
  static constexpr auto two = filter_table<2, false>(std::make_integer_sequence<int, kMaxMR2>());
  static constexpr auto one_b = filter_table<1, true>(std::make_integer_sequence<int, kMaxMR1>());
  static constexpr auto two_b = filter_table<2, true>(std::make_integer_sequence<int, kMaxMR2>());
  if (nv == 2) return bias ? two_b[mr - 1] : two[mr - 1];
  return bias ? one_b[mr - 1] : one[mr - 1];
}

// ---- Data movement --------------------------------------------------------------------------

// Images [b0, b0 + nb) of x (NHWC, shape sh) as FP32 with a zero border of sh.pad:
// xp[nb, H + 2 pad, W + 2 pad, C]. Each element is written once.
template <class T> void pad_images(const ConvShape& sh, const T* x, int64_t b0, int64_t nb, float* xp, bool parallel) {
  const int64_t hp = sh.h + 2 * sh.pad, line = (sh.w + 2 * sh.pad) * sh.c, left = sh.pad * sh.c, run = sh.w * sh.c;
#pragma omp parallel for collapse(2) if (parallel && nb * hp > 8)
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t ip = 0; ip < hp; ++ip) {
      float* d = xp + (b * hp + ip) * line;
      const int64_t ih = ip - sh.pad;
      if (ih < 0 || ih >= sh.h) {
        std::fill(d, d + line, 0.0f);
        continue;
      }
      std::fill(d, d + left, 0.0f);
      convert_run(x + ((b0 + b) * sh.h + ih) * run, d + left, run);
      std::fill(d + left + run, d + line, 0.0f);
    }
}

// Weights as panels for the forward tile, in scratch slot 0: panel q holds output channels
// [q*NR, (q+1)*NR) as rows of NR floats, one row per reduction index e < depth:
// panels[(q*depth + e)*NR + lane] = weight(q*NR + lane, e).
template <class F> const float* pack_panels(int64_t outs, int64_t depth, int nr, F weight) {
  float* p = scratch<float>(0, outs * depth);
  const int64_t panels = outs / nr;
#pragma omp parallel for collapse(2) if (outs * depth > (1 << 16))
  for (int64_t q = 0; q < panels; ++q)
    for (int64_t e = 0; e < depth; ++e)
      for (int lane = 0; lane < nr; ++lane) p[(q * depth + e) * nr + lane] = weight(q * nr + lane, e);
  return p;
}

// y = conv(x, panels) + bias for one group of shape sh, the weights packed by pack_panels
// (depth R*S*C), bias null or K floats. Images go in chunks of about 8 MB of padded input;
// threads split a chunk's output rows.
template <class T> void forward_packed(const ConvShape& sh, const T* x, const float* panels, const float* bias, T* y) {
  const int nv = panel_vectors(sh.k), nr = nv * W;
  const int64_t oh = sh.out_h(), ow = sh.out_w(), hp = sh.h + 2 * sh.pad, wp = sh.w + 2 * sh.pad;
  const int64_t run = sh.s * sh.c, depth = sh.r * run, row_pitch = wp * sh.c, step = sh.stride * sh.c;
  const int64_t per_image = hp * wp * sh.c, chunk = std::max<int64_t>(1, (int64_t(1) << 21) / per_image);
  const Tiles tiles(ow, max_tile(nv));
  for (int64_t b0 = 0; b0 < sh.n; b0 += chunk) {
    const int64_t nb = std::min(chunk, sh.n - b0);
    const float* xp;
    if (std::is_same_v<T, float> && sh.pad == 0) {
      xp = reinterpret_cast<const float*>(x) + b0 * per_image;
    } else {
      float* p = scratch<float>(2, nb * per_image);
      pad_images(sh, x, b0, nb, p, true);
      xp = p;
    }
#pragma omp parallel for collapse(2) schedule(static) if (nb * oh > 1)
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t i = 0; i < oh; ++i) {
        T* y_row = y + ((b0 + b) * oh + i) * ow * sh.k;
        float* out;
        if constexpr (std::is_same_v<T, float>) out = y_row;
        else out = scratch<float>(3, ow * sh.k);  // this thread's
        const float* x_row = xp + (b * hp + i * sh.stride) * row_pitch;
        for (int64_t q = 0; q < sh.k / nr; ++q)
          for (int64_t ti = 0; ti < tiles.count; ++ti) {
            const Tile t = tiles[ti];
            forward_fn(nv, t.size)(x_row + t.start * step, step, row_pitch, sh.r, run, panels + q * depth * nr,
                                   bias ? bias + q * nr : nullptr, out + t.start * sh.k + q * nr, sh.k);
          }
        if constexpr (!std::is_same_v<T, float>) convert_run(out, y_row, ow * sh.k);
      }
  }
}

// The filter gradient's fixed partition of the batch: at most this many blocks of whole images.
constexpr int64_t kFilterBlocks = 16;
// Output pixels a filter tile sums between visits to its partial sums (whole output rows):
// the rows' gradients and input stay in L1 while every tile of the filter passes over them.
constexpr int64_t kFilterPixels = 128;

// Every output row streams the whole packed weight matrix (and every filter tile its block's
// partial sums), so the implicit kernels pay only while the weights stay in L2. Measured with
// bench_cpu_conv (batch 64, 2 threads): 576 KiB of weights (128 -> 128, 3x3) 1.07-1.7x the
// im2col path, 2.25 MiB (256 -> 256) 0.68-0.9x, 9 MiB (512 -> 512) 0.23-0.52x.
constexpr int64_t kMaxWeightBytes = 640 * 1024;

bool weights_fit(const ConvShape& sh) {
  // Empty shapes go to im2col, whose loops simply run zero times (the gradients come out 0).
  const bool nonempty = sh.n > 0 && sh.c > 0 && sh.k > 0 && sh.out_h() > 0 && sh.out_w() > 0;
  return nonempty && sh.groups == 1 && !sh.pointwise() && sh.patch() * sh.k * int64_t(sizeof(float)) <= kMaxWeightBytes;
}

}  // namespace

bool implicit_forward_fits(const ConvShape& sh) { return weights_fit(sh) && sh.k % W == 0; }

bool implicit_backward_data_fits(const ConvShape& sh) {
  return weights_fit(sh) && sh.stride == 1 && sh.r == sh.s && sh.pad <= sh.r - 1 && sh.c % W == 0;
}

bool implicit_backward_filter_fits(const ConvShape& sh) { return weights_fit(sh) && sh.k % W == 0; }

template <class T> void conv2d_forward_implicit(const ConvShape& sh, const T* x, const T* w, const T* bias, T* y) {
  const int64_t depth = sh.patch();
  // KRSC weights: output channel o's reduction index e is w[o*depth + e] already.
  const float* panels = pack_panels(sh.k, depth, panel_vectors(sh.k) * W,
                                    [&](int64_t o, int64_t e) { return load_simd(w[o * depth + e]); });
  float* bias_f = nullptr;
  if (bias) {
    bias_f = scratch<float>(1, sh.k);
    for (int64_t o = 0; o < sh.k; ++o) bias_f[o] = load_simd(bias[o]);
  }
  forward_packed(sh, x, panels, bias_f, y);
}

// With stride 1, gx[h, w, c] = sum over r, s, k of gy[h + pad - r, w + pad - s, k] * w[k, r, s, c]:
// the forward convolution of gy (K channels) with padding R-1-pad and the filters flipped in
// space and transposed to [C][R][S][K].
template <class T> void conv2d_backward_data_implicit(const ConvShape& sh, const T* gy, const T* w, T* gx) {
  const ConvShape t{sh.n, sh.out_h(), sh.out_w(), sh.k, sh.c, sh.r, sh.s, 1, sh.r - 1 - sh.pad};
  const int64_t R = sh.r, S = sh.s, K = sh.k, C = sh.c;
  const float* panels = pack_panels(C, R * S * K, panel_vectors(C) * W, [&](int64_t c, int64_t e) {
    const int64_t r = e / (S * K), s = e / K % S, k = e % K;  // e indexes [R][S][K] of the flipped filter
    return load_simd(w[((k * R + (R - 1 - r)) * S + (S - 1 - s)) * C + c]);
  });
  forward_packed(t, gy, panels, nullptr, gx);
}

// gw[k, e] = sum over output pixels of gy[p, k] * (input under tap e of p); each block of
// images sums into its own partial [R*S*C + 1][K] (the last row the bias sums), the blocks
// are then added in block order: no atomics, and the bits do not depend on the thread count.
template <class T>
void conv2d_backward_filter_implicit(const ConvShape& sh, const T* x, const T* gy, T* gw, T* gbias) {
  const int nv = panel_vectors(sh.k), nr = nv * W;
  const int64_t oh = sh.out_h(), ow = sh.out_w(), hp = sh.h + 2 * sh.pad, wp = sh.w + 2 * sh.pad;
  const int64_t run = sh.s * sh.c, depth = sh.r * run, row_pitch = wp * sh.c, step = sh.stride * sh.c;
  const int64_t per_block = (sh.n + kFilterBlocks - 1) / kFilterBlocks, blocks = (sh.n + per_block - 1) / per_block;
  const int64_t part_elems = (depth + 1) * sh.k;
  const int64_t group_rows = std::min(oh, std::max<int64_t>(1, kFilterPixels / ow));
  const Tiles tiles(run, max_tile(nv));
  float* part = scratch<float>(4, blocks * part_elems);
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    float* p = part + blk * part_elems;
    float* xp = scratch<float>(2, hp * wp * sh.c);  // this thread's padded image
    bool first = true;
    for (int64_t b = blk * per_block; b < std::min(sh.n, (blk + 1) * per_block); ++b) {
      pad_images(sh, x, b, 1, xp, false);
      const float* g;
      if constexpr (std::is_same_v<T, float>) {
        g = gy + b * oh * ow * sh.k;
      } else {
        float* gf = scratch<float>(3, oh * ow * sh.k);
        convert_run(gy + b * oh * ow * sh.k, gf, oh * ow * sh.k);
        g = gf;
      }
      for (int64_t i0 = 0; i0 < oh; i0 += group_rows, first = false) {
        const int64_t rows = std::min(group_rows, oh - i0);
        for (int64_t q = 0; q < sh.k / nr; ++q)
          for (int64_t r = 0; r < sh.r; ++r)
            for (int64_t ti = 0; ti < tiles.count; ++ti) {
              const Tile t = tiles[ti];
              const bool with_bias = gbias && r == 0 && t.start == 0;
              filter_fn(nv, t.size, with_bias)(xp + (i0 * sh.stride + r) * row_pitch + t.start, step,
                                               sh.stride * row_pitch, rows, ow, g + i0 * ow * sh.k + q * nr, sh.k,
                                               p + (r * run + t.start) * sh.k + q * nr, sh.k,
                                               p + depth * sh.k + q * nr, first);
            }
      }
    }
  }
  // Sum the blocks in order, transposing [e][k] to KRSC's [k][e]; one rounding to T.
  const int64_t rows_out = gbias ? depth + 1 : depth;
#pragma omp parallel for if (rows_out * sh.k * blocks > (1 << 16))
  for (int64_t e = 0; e < rows_out; ++e) {
    float* sum = scratch<float>(5, sh.k);  // this thread's
    std::copy(part + e * sh.k, part + (e + 1) * sh.k, sum);
    for (int64_t blk = 1; blk < blocks; ++blk) {
      const float* src = part + blk * part_elems + e * sh.k;
      for (int64_t o = 0; o < sh.k; ++o) sum[o] += src[o];
    }
    if (e < depth)
      for (int64_t o = 0; o < sh.k; ++o) gw[o * depth + e] = from_acc<T>(sum[o]);
    else
      for (int64_t o = 0; o < sh.k; ++o) gbias[o] = from_acc<T>(sum[o]);
  }
}

#define KERNELS_CONV_IMPLICIT_INSTANTIATE(T)                                                               \
  template void conv2d_forward_implicit<T>(const ConvShape&, const T*, const T*, const T*, T*);           \
  template void conv2d_backward_data_implicit<T>(const ConvShape&, const T*, const T*, T*);               \
  template void conv2d_backward_filter_implicit<T>(const ConvShape&, const T*, const T*, T*, T*);
KERNELS_CONV_IMPLICIT_INSTANTIATE(float)
KERNELS_CONV_IMPLICIT_INSTANTIATE(half)
KERNELS_CONV_IMPLICIT_INSTANTIATE(bfloat16)

}  // namespace kernels::cpu

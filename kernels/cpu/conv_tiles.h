// The BF16 convolution on tiles (forward, data gradient, filter gradient), written once over a
// tile type: amx::EmulatedTiles, amx::HardwareTiles (AMX) or Avx512Bf16Tiles (VDPBF16PS). FP32
// accumulation, one rounding to BF16 at the store. Declared for the engine in conv_bf16_tiles.h.
//
// The implicit GEMM reads its A tiles straight from a zero-padded NHWC copy of the input. In
// that copy each image is one flat run of pixels, hp rows of wp = w + 2 pad. Output pixel
// (oh, ow) is numbered q = oh * wp + ow, ow < wp, so that its tap (kh, kw) reads padded pixel
// stride * q + kh * wp + kw: 16 consecutive q of one tap are one tile load with a row stride of
// `stride` pixels, across row ends too. The q with ow >= out_w are computed and thrown away:
// about 2 pad / w of the work at stride 1, but half of it at stride 2 (rows of wp outputs where
// out_w is about wp / 2; per-row tiles would avoid that). Channels are padded with zeros to 32 (a tile row), output channels to 32 (two C
// tiles). Zero padding adds zero products, so tails need no code of their own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/scratch.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

namespace kernels::cpu::amx {

// The flat padded layout of one convolution (the header comment).
struct TileConvGeometry {
  int64_t cp, kp;   // input and output channels rounded up to 32
  int64_t wp;       // padded width
  int64_t qw, q;    // flat output pixels per output row (wp) and per image
  int64_t qp;       // q rounded up to 32: the rows of two A tiles per block
  int64_t plane;    // pixels per image in the padded copy, room for the last block's reads included
  int64_t taps;     // r * s
};

inline TileConvGeometry tile_conv_geometry(const ConvShape& sh) {
  TileConvGeometry g;
  g.cp = round_up32(sh.c);
  g.kp = round_up32(sh.k);
  g.wp = sh.w + 2 * sh.pad;
  g.qw = g.wp;
  g.q = sh.out_h() * g.qw;
  g.qp = round_up32(g.q);
  g.taps = sh.r * sh.s;
  const int64_t last_read = sh.stride * (g.qp - 1) + (sh.r - 1) * g.wp + (sh.s - 1);
  g.plane = std::max((sh.h + 2 * sh.pad) * g.wp, last_read + 1);
  return g;
}

// xp[b][pixel][channel], pixel over the flat padded run, channels up to cp: x or zero.
inline void pad_input_nhwc(const ConvShape& sh, const TileConvGeometry& g, const bfloat16* x, bfloat16* xp) {
#pragma omp parallel for collapse(2) if (sh.n * g.plane * g.cp > (1 << 16))
  for (int64_t b = 0; b < sh.n; ++b)
    for (int64_t p = 0; p < g.plane; ++p) {
      bfloat16* dst = xp + (b * g.plane + p) * g.cp;
      const int64_t ih = p / g.wp - sh.pad, iw = p % g.wp - sh.pad;
      int64_t done = 0;
      if (ih >= 0 && ih < sh.h && iw >= 0 && iw < sh.w) {
        std::memcpy(dst, x + ((b * sh.h + ih) * sh.w + iw) * sh.c, sizeof(bfloat16) * sh.c);
        done = sh.c;
      }
      std::memset(dst + done, 0, sizeof(bfloat16) * (g.cp - done));
    }
}

// Packed filters for the forward kernel: for each block of 16 output channels, each tap and
// each 32 input channels, one 32 x 16 B tile in VNNI layout (1 KiB). weight(co, tap, ci) gives
// the filter value for real channels; the padding is zero.
template <class Weight>
void pack_filters(const TileConvGeometry& g, int64_t k, int64_t c, Weight weight, bfloat16* wp) {
  const int64_t chunks = g.cp / 32;
#pragma omp parallel for if (g.kp * g.taps * g.cp > (1 << 16))
  for (int64_t co = 0; co < g.kp; ++co)
    for (int64_t t = 0; t < g.taps; ++t)
      for (int64_t ci = 0; ci < g.cp; ++ci)
        wp[((co / 16) * g.taps * chunks + t * chunks + ci / 32) * 512 + vnni_index(ci % 32, co % 16)] =
            co < k && ci < c ? weight(co, t, ci) : bfloat16::from_bits(0);
}

// y = conv(x, packed filters) + bias for the geometry g of sh (bias FP32, may be null). Each
// thread takes whole 32-pixel x 32-channel blocks of C and runs all taps and channels into them.
template <class Tiles>
void tile_conv_forward_packed(const ConvShape& sh, const TileConvGeometry& g, const bfloat16* xp, const bfloat16* wp,
                              const float* bias, bfloat16* y) {
  const int64_t oh_n = sh.out_h(), ow_n = sh.out_w(), chunks = g.cp / 32;
  const int64_t blocks_q = g.qp / 32, blocks_k = g.kp / 32, blocks = sh.n * blocks_q * blocks_k;
  const int64_t a_stride = sh.stride * g.cp * 2;  // bytes from one tile row (output pixel) to the next
  const int64_t b_block = g.taps * chunks * 512;  // one block of 16 output channels
#pragma omp parallel if (blocks > 1)
  {
    Tiles t;  // a tile configuration per thread
    t.configure(gemm_tile_config());
    alignas(64) float cbuf[4][kTileRows * 16];
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t b = blk / (blocks_q * blocks_k), q0 = (blk / blocks_k) % blocks_q * 32, k0 = blk % blocks_k * 32;
      t.template zero<0>();
      t.template zero<1>();
      t.template zero<2>();
      t.template zero<3>();
      for (int64_t tap = 0; tap < g.taps; ++tap) {
        const bfloat16* a = xp + (b * g.plane + sh.stride * q0 + (tap / sh.s) * g.wp + tap % sh.s) * g.cp;
        const bfloat16* w0 = wp + (k0 / 16) * b_block + tap * chunks * 512;
        for (int64_t ch = 0; ch < chunks; ++ch) {
          t.template load<4>(a + ch * 32, a_stride);
          t.template load<5>(a + 16 * sh.stride * g.cp + ch * 32, a_stride);
          t.template load<6>(w0 + ch * 512, kTileBytes);
          t.template load<7>(w0 + b_block + ch * 512, kTileBytes);
          t.template dpbf16ps<0, 4, 6>();
          t.template dpbf16ps<1, 4, 7>();
          t.template dpbf16ps<2, 5, 6>();
          t.template dpbf16ps<3, 5, 7>();
        }
      }
      t.template store<0>(cbuf[0], 64);
      t.template store<1>(cbuf[1], 64);
      t.template store<2>(cbuf[2], 64);
      t.template store<3>(cbuf[3], 64);
      // C tile i covers pixels q0 + 16 * (i / 2), channels k0 + 16 * (i % 2).
      for (int i = 0; i < 4; ++i)
        for (int r = 0; r < 16; ++r) {
          const int64_t q = q0 + 16 * (i / 2) + r, oh = q / g.qw, ow = q % g.qw;
          if (q >= g.q) break;
          if (ow >= ow_n) continue;  // a wrapped pixel
          bfloat16* out = y + ((b * oh_n + oh) * ow_n + ow) * sh.k;
          const int64_t c0 = k0 + 16 * (i % 2), cn = std::min<int64_t>(16, sh.k - c0);
          for (int64_t c = 0; c < cn; ++c)
            out[c0 + c] = from_acc<bfloat16>(cbuf[i][r * 16 + c] + (bias ? bias[c0 + c] : 0.f));
        }
    }
    t.release();
  }
}

// Scratch slots: 0 the padded input, 1 the packed filters, 2 the FP32 bias.
template <class Tiles>
void tile_conv_forward(const ConvShape& sh, const bfloat16* x, const bfloat16* w, const bfloat16* bias, bfloat16* y) {
  const TileConvGeometry g = tile_conv_geometry(sh);
  bfloat16* xp = scratch<bfloat16>(0, sh.n * g.plane * g.cp);
  bfloat16* wp = scratch<bfloat16>(1, g.kp * g.taps * g.cp);
  pad_input_nhwc(sh, g, x, xp);
  pack_filters(g, sh.k, sh.c, [&](int64_t co, int64_t t, int64_t ci) { return w[(co * g.taps + t) * sh.c + ci]; },
               wp);
  float* fb = nullptr;
  if (bias) {
    fb = scratch<float>(2, sh.k);
    for (int64_t o = 0; o < sh.k; ++o) fb[o] = float(bias[o]);
  }
  tile_conv_forward_packed<Tiles>(sh, g, xp, wp, fb, y);
}

// The data gradient at stride 1 is a forward convolution of gy, padded by r - 1 - pad, with
// the filters turned 180 degrees and their input and output channels swapped.
inline bool tile_backward_data_fits(const ConvShape& sh) {
  return sh.groups == 1 && sh.stride == 1 && sh.r == sh.s && sh.pad <= sh.r - 1;
}
inline ConvShape backward_data_as_forward(const ConvShape& sh) {
  ConvShape f = sh;
  f.h = sh.out_h();
  f.w = sh.out_w();
  f.c = sh.k;
  f.k = sh.c;
  f.pad = sh.r - 1 - sh.pad;
  return f;
}

template <class Tiles>
void tile_conv_backward_data(const ConvShape& sh, const bfloat16* gy, const bfloat16* w, bfloat16* gx) {
  const ConvShape f = backward_data_as_forward(sh);
  const TileConvGeometry g = tile_conv_geometry(f);
  bfloat16* gyp = scratch<bfloat16>(0, f.n * g.plane * g.cp);
  bfloat16* wp = scratch<bfloat16>(1, g.kp * g.taps * g.cp);
  pad_input_nhwc(f, g, gy, gyp);
  // Forward filter (c, tap (i, j), k) of f is w[k][r - 1 - i][s - 1 - j][c].
  pack_filters(g, f.k, f.c,
               [&](int64_t c, int64_t t, int64_t k) { return w[(k * g.taps + (g.taps - 1 - t)) * sh.c + c]; }, wp);
  tile_conv_forward_packed<Tiles>(f, g, gyp, wp, nullptr, gx);
}

// The filter gradient: for each tap, gw[:, tap, :]^T = X_tap^T * GY, summed over every pixel of
// every image. A = the input, channel-major so that 32 consecutive pixels of one channel are one
// tile row: split into `stride` phases (padded pixels stride * m + f), so that the pixels
// stride * q + off of a tap are consecutive m in phase off % stride. B = gy in VNNI pairs of
// pixels, zero at wrapped and padding pixels (so those add nothing). Each task (tap, 32 input
// channels, 32 output channels) sums all images in one fixed order: the same bits for any
// thread count.
template <class Tiles>
void tile_conv_backward_filter(const ConvShape& sh, const bfloat16* x, const bfloat16* gy, bfloat16* gw,
                               bfloat16* gbias) {
  const TileConvGeometry g = tile_conv_geometry(sh);
  const int64_t s = sh.stride, lm = (g.plane + s - 1) / s, oh_n = sh.out_h(), ow_n = sh.out_w();
  // Scratch slots: 0 the padded input (as the forward), 1 its channel-major phases, 2 gy in pairs.
  bfloat16* xp = scratch<bfloat16>(0, sh.n * g.plane * g.cp);
  bfloat16* xt = scratch<bfloat16>(1, sh.n * s * g.cp * lm);
  bfloat16* gv = scratch<bfloat16>(2, sh.n * g.qp * g.kp);
  pad_input_nhwc(sh, g, x, xp);
  const bfloat16 zero = bfloat16::from_bits(0);
#pragma omp parallel for collapse(2) if (sh.n * g.cp > 1)
  for (int64_t b = 0; b < sh.n; ++b)
    for (int64_t ci = 0; ci < g.cp; ++ci)
      for (int64_t f = 0; f < s; ++f) {
        bfloat16* row = xt + ((b * s + f) * g.cp + ci) * lm;
        for (int64_t m = 0; m < lm; ++m) {
          const int64_t p = s * m + f;
          row[m] = p < g.plane ? xp[(b * g.plane + p) * g.cp + ci] : zero;
        }
      }
#pragma omp parallel for collapse(2) if (sh.n * g.qp > 64)
  for (int64_t b = 0; b < sh.n; ++b)
    for (int64_t q = 0; q < g.qp; ++q) {
      bfloat16* pair = gv + (b * (g.qp / 2) + q / 2) * g.kp * 2 + q % 2;
      const int64_t oh = q / g.qw, ow = q % g.qw;
      const bool real = q < g.q && ow < ow_n;
      const bfloat16* src = gy + ((b * oh_n + oh) * ow_n + ow) * sh.k;
      for (int64_t co = 0; co < g.kp; ++co) pair[2 * co] = real && co < sh.k ? src[co] : zero;
    }

  const int64_t blocks_c = g.cp / 32, blocks_k = g.kp / 32, tasks = g.taps * blocks_c * blocks_k;
  const int64_t a_stride = lm * 2, b_stride = g.kp * 4;  // bytes from one tile row to the next
#pragma omp parallel if (tasks > 1)
  {
    Tiles t;
    t.configure(gemm_tile_config());
    alignas(64) float cbuf[4][kTileRows * 16];
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t tap = task / (blocks_c * blocks_k), c0 = (task / blocks_k) % blocks_c * 32,
                    k0 = task % blocks_k * 32;
      const int64_t off = (tap / sh.s) * g.wp + tap % sh.s;
      t.template zero<0>();
      t.template zero<1>();
      t.template zero<2>();
      t.template zero<3>();
      for (int64_t b = 0; b < sh.n; ++b) {
        const bfloat16* a = xt + ((b * s + off % s) * g.cp + c0) * lm + off / s;
        const bfloat16* bb = gv + b * g.qp * g.kp + k0 * 2;
        for (int64_t q0 = 0; q0 < g.qp; q0 += 32) {
          t.template load<4>(a + q0, a_stride);
          t.template load<5>(a + 16 * lm + q0, a_stride);
          t.template load<6>(bb + q0 * g.kp, b_stride);
          t.template load<7>(bb + q0 * g.kp + 32, b_stride);
          t.template dpbf16ps<0, 4, 6>();
          t.template dpbf16ps<1, 4, 7>();
          t.template dpbf16ps<2, 5, 6>();
          t.template dpbf16ps<3, 5, 7>();
        }
      }
      t.template store<0>(cbuf[0], 64);
      t.template store<1>(cbuf[1], 64);
      t.template store<2>(cbuf[2], 64);
      t.template store<3>(cbuf[3], 64);
      // C tile i: input channels c0 + 16 * (i / 2) (rows), output channels k0 + 16 * (i % 2).
      for (int i = 0; i < 4; ++i)
        for (int r = 0; r < 16; ++r) {
          const int64_t ci = c0 + 16 * (i / 2) + r;
          if (ci >= sh.c) break;
          for (int c = 0; c < 16; ++c) {
            const int64_t co = k0 + 16 * (i % 2) + c;
            if (co >= sh.k) break;
            gw[(co * g.taps + tap) * sh.c + ci] = from_acc<bfloat16>(cbuf[i][r * 16 + c]);
          }
        }
    }
    t.release();
  }
  if (gbias) {  // FP32 sums in pixel order, as the other paths
    float* acc = scratch<float>(3, sh.k);
    std::fill(acc, acc + sh.k, 0.f);
    for (int64_t p = 0; p < sh.n * oh_n * ow_n; ++p)
      for (int64_t co = 0; co < sh.k; ++co) acc[co] += float(gy[p * sh.k + co]);
    for (int64_t co = 0; co < sh.k; ++co) gbias[co] = from_acc<bfloat16>(acc[co]);
  }
}

}  // namespace kernels::cpu::amx

// The BF16 convolution on tiles (forward, data gradient, filter gradient), written once over a
// tile type: amx::EmulatedTiles, amx::HardwareTiles (AMX) or Avx512Bf16Tiles (VDPBF16PS). FP32
// accumulation, one rounding to BF16 at the store. The engine's entries: bf16_tiles.h.
//
// Two routes. The flat route (stride-1 friendly, no column matrix) reads its A tiles straight
// from a zero-padded NHWC copy of the input. In that copy each image is one flat run of pixels,
// hp rows of wp = w + 2 pad. Output pixel (oh, ow) is numbered q = oh * wp + ow, ow < wp, so that
// its tap (kh, kw) reads padded pixel stride * q + kh * wp + kw: 16 consecutive q of one tap are
// one tile load with a row stride of `stride` pixels, across row ends too. The q with ow >= out_w
// are computed and thrown away: about 2 pad / w of the work at stride 1, half of it at stride 2
// or on 4 x 4 images. Channels are padded with zeros to 32.
// The column route (every other shape) writes im2col rows padded to 32 and runs the tile GEMM
// of gemm_tiles.h on them: no work is thrown away but K's last partial block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/gemm_tiles.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/threads.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

namespace kernels::cpu::amx {

// Images per chunk of a pass whose operands take `per_image` bytes an image: the chunk's
// operands stay in the L2 caches while every task reads them. The tests lower chunk_bytes to
// run one image a chunk (one variable for the whole program).
inline int64_t tile_chunk_bytes = int64_t(3) << 19;  // 1.5 MiB

// Internal linkage from here: this header is also compiled under the AMX and AVX-512 target
// pragmas (gemm_amx_hw.cpp, tiles_avx512_bf16.cpp), and no copy of its code compiled there may
// be the one a generic caller links to.
namespace {

inline int64_t tile_images_per_chunk(int64_t n, int64_t per_image) {
  return std::clamp<int64_t>(tile_chunk_bytes / std::max<int64_t>(per_image, 1), 1, std::max<int64_t>(n, 1));
}

// ---- the flat route --------------------------------------------------------------------------

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

// Packed filters for the flat forward kernel: for each block of 16 output channels, each tap
// and each 32 input channels, one 32 x 16 B tile in VNNI layout (1 KiB). weight(co, tap, ci)
// gives the filter value for real channels; the padding is zero. Written in order, pair by pair.
template <class Weight>
void pack_filters(const TileConvGeometry& g, int64_t k, int64_t c, Weight weight, bfloat16* wp) {
  const int64_t chunks = g.cp / 32;
  const bfloat16 zero = bfloat16::from_bits(0);
#pragma omp parallel for collapse(2) if (g.kp * g.taps * g.cp > (1 << 16))
  for (int64_t cb = 0; cb < g.kp / 16; ++cb)
    for (int64_t t = 0; t < g.taps; ++t)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        bfloat16* tile = wp + ((cb * g.taps + t) * chunks + ch) * 512;
        for (int64_t pr = 0; pr < 16; ++pr)
          for (int64_t j = 0; j < 16; ++j) {
            const int64_t co = cb * 16 + j, ci = ch * 32 + 2 * pr;
            tile[pr * 32 + 2 * j] = co < k && ci < c ? weight(co, t, ci) : zero;
            tile[pr * 32 + 2 * j + 1] = co < k && ci + 1 < c ? weight(co, t, ci + 1) : zero;
          }
      }
}

// y = conv(x, packed filters) + bias (then ReLU when asked) for the geometry g of sh (bias FP32,
// may be null). Each
// thread takes whole 32-pixel x 32-channel blocks of C and runs all taps and channels into them.
template <class Tiles>
void tile_conv_forward_packed(const ConvShape& sh, const TileConvGeometry& g, const bfloat16* xp, const bfloat16* wp,
                              const float* bias, bfloat16* y, bool relu = false) {
  const int64_t oh_n = sh.out_h(), ow_n = sh.out_w(), chunks = g.cp / 32;
  const int64_t blocks_q = g.qp / 32, blocks_k = g.kp / 32, blocks = sh.n * blocks_q * blocks_k;
  const int64_t a_stride = sh.stride * g.cp * 2;  // bytes from one tile row (output pixel) to the next
  const int64_t b_block = g.taps * chunks * 512;  // one block of 16 output channels
  // Output channels go in groups whose filters (at most 1 MiB, half an L2) stay in L2 while every
  // image passes: 256 -> 512 filters (2.4 MB) otherwise came from L3 for every 32 pixels. Within
  // a group the channel blocks are innermost, so they share the pixels' tiles.
  constexpr int64_t kFilterGroupBytes = int64_t(1) << 20;
  const int64_t group = std::clamp<int64_t>(kFilterGroupBytes / (2 * 2 * b_block), 1, blocks_k);
#pragma omp parallel if (blocks > 1)
  {
    Tiles t;  // a tile configuration per thread
    t.configure(gemm_tile_config());
    alignas(64) float block[32 * 32];
#pragma omp for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t g0 = blk / (sh.n * blocks_q * group) * group, gn = std::min(group, blocks_k - g0);
      const int64_t in_group = blk - g0 * sh.n * blocks_q;  // (b, q, channel block) within the group
      const int64_t b = in_group / (blocks_q * gn), q0 = in_group / gn % blocks_q * 32, k0 = (g0 + in_group % gn) * 32;
      zero_block(t);
      for (int64_t tap = 0; tap < g.taps; ++tap) {
        const bfloat16* a = xp + (b * g.plane + sh.stride * q0 + (tap / sh.s) * g.wp + tap % sh.s) * g.cp;
        const bfloat16* w0 = wp + (k0 / 16) * b_block + tap * chunks * 512;
        for (int64_t ch = 0; ch < chunks; ++ch)
          block_step(t, a + ch * 32, a + 16 * sh.stride * g.cp + ch * 32, a_stride, w0 + ch * 512,
                     w0 + b_block + ch * 512, kTileBytes);
      }
      store_block(t, block);
      // Row r of the block is pixel q0 + r; channels k0 ... k0 + 31.
      const int64_t cn = std::min<int64_t>(32, sh.k - k0);
      for (int64_t r = 0; r < 32; ++r) {
        const int64_t q = q0 + r, oh = q / g.qw, ow = q % g.qw;
        if (q >= g.q) break;
        if (ow >= ow_n) continue;  // a wrapped pixel
        Tiles::round_row(block + r * 32, bias ? bias + k0 : nullptr, y + ((b * oh_n + oh) * ow_n + ow) * sh.k + k0, cn,
                         relu);
      }
    }
    t.release();
  }
}

// The bias in FP32 (scratch slot `slot`), or null.
inline const float* widen_bias(const bfloat16* bias, int64_t k, int slot) {
  if (!bias) return nullptr;
  float* fb = scratch<float>(slot, k);
  for (int64_t o = 0; o < k; ++o) fb[o] = float(bias[o]);
  return fb;
}

// Scratch slots: 0 the padded input, 1 the packed filters, 2 the FP32 bias.
template <class Tiles>
void tile_conv_forward(const ConvShape& sh, const bfloat16* x, const bfloat16* w, const bfloat16* bias, bfloat16* y,
                       bool relu = false) {
  const TileConvGeometry g = tile_conv_geometry(sh);
  bfloat16* xp = scratch<bfloat16>(0, sh.n * g.plane * g.cp);
  bfloat16* wp = scratch<bfloat16>(1, g.kp * g.taps * g.cp);
  pad_input_nhwc(sh, g, x, xp);
  pack_filters(g, sh.k, sh.c, [&](int64_t co, int64_t t, int64_t ci) { return w[(co * g.taps + t) * sh.c + ci]; },
               wp);
  tile_conv_forward_packed<Tiles>(sh, g, xp, wp, widen_bias(bias, sh.k, 2), y, relu);
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

// The filter gradient's operands for one image, all tile rows 64-byte aligned (an unaligned row
// costs a tile load several times over).
// A: gy transposed, gyt[co][q] for co < kp and the flat pixels q < qp (zero where q is a wrapped
// or padding pixel), turned around 32 pixels x 32 channels at a time: here the 32 pixels from q0.
// Adds their gy into bias_sum[k] (FP32, pixel order) when that is not null.
template <class Tiles>
void transpose_output_gradient(const ConvShape& sh, const TileConvGeometry& g, const bfloat16* gy, int64_t q0,
                               bfloat16* gyt, float* bias_sum) {
  const int64_t ow_n = sh.out_w();
  const uint16_t* src = reinterpret_cast<const uint16_t*>(gy);
  alignas(64) uint16_t blk[32][32];  // [pixel][channel]
  if (bias_sum) std::fill(bias_sum, bias_sum + sh.k, 0.f);
  for (int64_t c0 = 0; c0 < g.kp; c0 += 32) {
    const int64_t cn = std::clamp<int64_t>(sh.k - c0, 0, 32);
    for (int64_t i = 0; i < 32; ++i) {
      const int64_t q = q0 + i, oh = q / g.qw, ow = q % g.qw;
      int64_t done = 0;
      if (q < g.q && ow < ow_n) {
        const uint16_t* row = src + (oh * ow_n + ow) * sh.k + c0;
        std::memcpy(blk[i], row, sizeof(uint16_t) * cn);
        if (bias_sum)
          for (int64_t c = 0; c < cn; ++c) bias_sum[c0 + c] += bf16_bits_to_float(row[c]);
        done = cn;
      }
      std::memset(blk[i] + done, 0, sizeof(uint16_t) * (32 - done));
    }
    Tiles::transpose32(&blk[0][0], 32, reinterpret_cast<uint16_t*>(gyt) + c0 * g.qp + q0, g.qp);
  }
}

// B: the padded input in VNNI pairs. The pixels a tap reads for flat outputs q are
// stride * q + off = stride * m + f with m = q + off / stride, f = off % stride; two consecutive q
// are two consecutive m of phase f. Pair row pr of (phase f, parity e) holds the padded pixels
// stride * (2 pr + e + h) + f, h = 0, 1, channels interleaved: xv[((f * 2 + e) * pairs + pr) *
// 2 cp + 2 c + h]; a tap whose m starts at parity e reads parity e, so every pair row it needs is
// whole.
inline int64_t input_pairs(const TileConvGeometry& g, int64_t stride) {
  return (g.plane + stride - 1) / stride / 2 + 1;  // pair rows per phase and parity
}
// Pair rows [pr0, pr1) of (phase f, parity e) of one image.
inline void pair_input(const ConvShape& sh, const TileConvGeometry& g, const bfloat16* x, int64_t f, int64_t e,
                       int64_t pr0, int64_t pr1, bfloat16* xv) {
  const int64_t s = sh.stride, pairs = input_pairs(g, s);
  const uint16_t* src = reinterpret_cast<const uint16_t*>(x);
  uint16_t* out = reinterpret_cast<uint16_t*>(xv);
  for (int64_t pr = pr0; pr < pr1; ++pr) {
    uint16_t* d = out + ((f * 2 + e) * pairs + pr) * 2 * g.cp;
    const uint16_t* row[2] = {nullptr, nullptr};
    for (int h = 0; h < 2; ++h) {
      const int64_t p = s * (2 * pr + e + h) + f, ih = p / g.wp - sh.pad, iw = p % g.wp - sh.pad;
      if (p < g.plane && ih >= 0 && ih < sh.h && iw >= 0 && iw < sh.w) row[h] = src + (ih * sh.w + iw) * sh.c;
    }
    if (row[0] && row[1]) {
      for (int64_t c = 0; c < sh.c; ++c) {
        d[2 * c] = row[0][c];
        d[2 * c + 1] = row[1][c];
      }
    } else {
      for (int64_t c = 0; c < sh.c; ++c) {
        d[2 * c] = row[0] ? row[0][c] : 0;
        d[2 * c + 1] = row[1] ? row[1][c] : 0;
      }
    }
    std::memset(d + 2 * sh.c, 0, sizeof(uint16_t) * 2 * (g.cp - sh.c));
  }
}

// The filter gradient: for each tap, gw[:, tap, :] = GY^T * X_tap, summed over every pixel of
// every image: A = gy transposed (32 output channels x 32 pixels a step), B = the input pixels the
// tap reads, in VNNI pairs (pair_input). Wrapped pixels are zero in A, so the finite input
// values they meet add nothing (an inf or NaN there would give a NaN the other routes do not:
// such a step is skipped by the loss scaler anyway). The images go in chunks whose operands fit in L2: each task (32 output
// channels, tap, 32 input channels) keeps its sums in FP32 between chunks and adds the images in
// one fixed order, so the bits do not depend on the thread count.
template <class Tiles>
void tile_conv_backward_filter(const ConvShape& sh, const bfloat16* x, const bfloat16* gy, bfloat16* gw,
                               bfloat16* gbias) {
  const TileConvGeometry g = tile_conv_geometry(sh);
  const int64_t s = sh.stride, pairs = input_pairs(g, s), oh_n = sh.out_h(), ow_n = sh.out_w();
  const int64_t xv_image = s * 2 * pairs * 2 * g.cp, gyt_image = g.kp * g.qp;
  const int64_t chunk = tile_images_per_chunk(sh.n, 2 * (xv_image + gyt_image));
  const int64_t blocks_c = g.cp / 32, blocks_k = g.kp / 32, tasks = blocks_k * g.taps * blocks_c;
  const int64_t blocks_q = g.qp / 32, pair_pieces = 2 * s * ((pairs + 31) / 32);
  // Scratch slots: 1 the chunk's paired input, 2 its transposed gy, 3 the tasks' FP32 sums, 4 the
  // bias sums of each image's 32-pixel blocks.
  bfloat16* xv = scratch<bfloat16>(1, chunk * xv_image);
  bfloat16* gyt = scratch<bfloat16>(2, chunk * gyt_image);
  float* sums = scratch<float>(3, tasks * 1024);
  float* bias_sums = gbias ? scratch<float>(4, sh.n * blocks_q * sh.k) : nullptr;
  const int64_t a_stride = g.qp * 2, b_stride = g.cp * 4;  // bytes from one tile row to the next

  for (int64_t b0 = 0; b0 < sh.n; b0 += chunk) {
    const int64_t nb = std::min(chunk, sh.n - b0);
    // The chunk's operands, in pieces of 32 pixels (gy) and 32 pair rows (x) over all threads.
#pragma omp parallel
    {
#pragma omp for collapse(2) schedule(static) nowait
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t qb = 0; qb < blocks_q; ++qb)
          transpose_output_gradient<Tiles>(sh, g, gy + (b0 + b) * oh_n * ow_n * sh.k, qb * 32, gyt + b * gyt_image,
                                           bias_sums ? bias_sums + ((b0 + b) * blocks_q + qb) * sh.k : nullptr);
#pragma omp for collapse(2) schedule(static)
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t piece = 0; piece < pair_pieces; ++piece) {
          const int64_t fe = piece / ((pairs + 31) / 32), pr0 = piece % ((pairs + 31) / 32) * 32;
          pair_input(sh, g, x + (b0 + b) * sh.h * sh.w * sh.c, fe / 2, fe % 2, pr0, std::min(pairs, pr0 + 32),
                     xv + b * xv_image);
        }
    }
#pragma omp parallel if (tasks > 1)
    {
      Tiles t;
      t.configure(gemm_tile_config());
#pragma omp for schedule(static)
      for (int64_t task = 0; task < tasks; ++task) {  // consecutive tasks share A
        const int64_t k0 = task / (g.taps * blocks_c) * 32, tap = task / blocks_c % g.taps, c0 = task % blocks_c * 32;
        const int64_t off = (tap / sh.s) * g.wp + tap % sh.s, f = off % s, m0 = off / s, e = m0 % 2;
        float* sum = sums + task * 1024;
        if (b0 == 0) zero_block(t);
        else load_block(t, sum);
        for (int64_t b = 0; b < nb; ++b) {
          const bfloat16* a = gyt + b * gyt_image + k0 * g.qp;
          const bfloat16* bv = xv + b * xv_image + ((f * 2 + e) * pairs + (m0 - e) / 2) * 2 * g.cp + 2 * c0;
          for (int64_t q0 = 0; q0 < g.qp; q0 += 32)
            block_step(t, a + q0, a + 16 * g.qp + q0, a_stride, bv + q0 * g.cp, bv + q0 * g.cp + 32, b_stride);
        }
        store_block(t, sum);
      }
      t.release();
    }
  }
  // Task block row r: output channel k0 + r; column j: input channel c0 + j.
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t k0 = task / (g.taps * blocks_c) * 32, tap = task / blocks_c % g.taps, c0 = task % blocks_c * 32;
    const float* sum = sums + task * 1024;
    for (int64_t r = 0; r < 32 && k0 + r < sh.k; ++r)
      for (int64_t j = 0; j < 32 && c0 + j < sh.c; ++j)
        gw[((k0 + r) * g.taps + tap) * sh.c + c0 + j] = from_acc<bfloat16>(sum[r * 32 + j]);
  }
  if (gbias) {  // the 32-pixel blocks' FP32 sums added in order, image by image
    for (int64_t co = 0; co < sh.k; ++co) {
      float acc = 0.f;
      for (int64_t i = 0; i < sh.n * blocks_q; ++i) acc += bias_sums[i * sh.k + co];
      gbias[co] = from_acc<bfloat16>(acc);
    }
  }
}

// ---- the column route ------------------------------------------------------------------------

// One im2col row: output pixel (i, j) of image b, entry kk = (r * S + s) * C + c, zero-padded
// to `width`. In NHWC the taps s of one kernel row are one contiguous run of channels, so each
// kernel row is one copy.
inline void im2col_row(const ConvShape& sh, const bfloat16* x, int64_t b, int64_t i, int64_t j, int64_t width,
                       bfloat16* row) {
  const int64_t iw0 = j * sh.stride - sh.pad;  // input column of tap s = 0
  const int64_t s_lo = std::clamp<int64_t>(-iw0, 0, sh.s), s_hi = std::clamp<int64_t>(sh.w - iw0, s_lo, sh.s);
  const int64_t run = sh.s * sh.c;
  for (int64_t r = 0; r < sh.r; ++r) {
    bfloat16* dst = row + r * run;
    const int64_t ih = i * sh.stride - sh.pad + r;
    if (ih < 0 || ih >= sh.h || s_lo >= s_hi) {
      std::fill_n(dst, run, bfloat16::from_bits(0));
      continue;
    }
    std::fill_n(dst, s_lo * sh.c, bfloat16::from_bits(0));
    std::copy_n(x + ((b * sh.h + ih) * sh.w + iw0 + s_lo) * sh.c, (s_hi - s_lo) * sh.c, dst + s_lo * sh.c);
    std::fill_n(dst + s_hi * sh.c, (sh.s - s_hi) * sh.c, bfloat16::from_bits(0));
  }
  std::fill_n(row + sh.r * run, width - sh.r * run, bfloat16::from_bits(0));
}

// Walks output pixels m = ((b - b0) * out_h + i) * out_w + j in order, without divisions.
struct PixelCursor {
  int64_t b, i, j;
  PixelCursor(const ConvShape& sh, int64_t b0, int64_t m)
      : b(b0 + m / (sh.out_h() * sh.out_w())), i(m / sh.out_w() % sh.out_h()), j(m % sh.out_w()) {}
  void next(const ConvShape& sh) {
    if (++j < sh.out_w()) return;
    j = 0;
    if (++i < sh.out_h()) return;
    i = 0;
    ++b;
  }
};

// The im2col rows of images b0 ... b0 + nb - 1, Kp wide, then zero rows up to Mp.
inline void im2col_rows(const ConvShape& sh, const bfloat16* x, int64_t b0, int64_t nb, int64_t Kp, int64_t Mp,
                        bfloat16* col) {
  const int64_t oh = sh.out_h(), ow = sh.out_w(), rows = nb * oh * ow;
#pragma omp parallel for collapse(2) if (rows * Kp > (1 << 15))
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) im2col_row(sh, x, b0 + b, i, j, Kp, col + ((b * oh + i) * ow + j) * Kp);
  std::fill(col + rows * Kp, col + Mp * Kp, bfloat16::from_bits(0));
}

// Images per chunk of the column route: a chunk's column matrix about 2 MiB (it is read once per
// block row, so it may be larger than the other passes' chunks).
inline int64_t column_images_per_chunk(const ConvShape& sh) {
  constexpr int64_t kColumnChunkBytes = int64_t(1) << 21;
  const int64_t per_image = sh.out_h() * sh.out_w() * round_up32(sh.patch()) * 2;
  return std::clamp<int64_t>(kColumnChunkBytes / std::max<int64_t>(per_image, 1), 1, std::max<int64_t>(sh.n, 1));
}

// Forward: Y = col(x) * W^T per chunk of images, W packed (VNNI blocks, Kp = round_up32(patch),
// Np = round_up32(k)); bias FP32 or null. Scratch slot 0: the column matrix.
template <class Tiles>
void tile_conv_forward_columns_packed(const ConvShape& sh, const bfloat16* x, const bfloat16* wpk, const float* fb,
                                      bfloat16* y, bool relu = false) {
  const int64_t Kp = round_up32(sh.patch()), Np = round_up32(sh.k), pixels = sh.out_h() * sh.out_w();
  const int64_t chunk = column_images_per_chunk(sh);
  for (int64_t b0 = 0; b0 < sh.n; b0 += chunk) {
    const int64_t nb = std::min(chunk, sh.n - b0), M = nb * pixels, Mp = round_up32(M);
    bfloat16* col = scratch<bfloat16>(0, Mp * Kp);
    im2col_rows(sh, x, b0, nb, Kp, Mp, col);
    bfloat16* yc = y + b0 * pixels * sh.k;
    tile_gemm_blocks<Tiles>(Mp, Np, Kp, col, Kp, wpk, [&](int64_t i0, int64_t j0, const float* block) {
      const int64_t cn = std::min<int64_t>(32, sh.k - j0);
      for (int64_t r = 0; r < 32 && i0 + r < M; ++r)
        Tiles::round_row(block + r * 32, fb ? fb + j0 : nullptr, yc + (i0 + r) * sh.k + j0, cn, relu);
    });
  }
}

// Scratch slots: 1 the packed filters, 2 the FP32 bias (and 0, the column matrix).
template <class Tiles>
void tile_conv_forward_columns(const ConvShape& sh, const bfloat16* x, const bfloat16* w, const bfloat16* bias,
                               bfloat16* y, bool relu = false) {
  const int64_t patch = sh.patch(), Kp = round_up32(patch), Np = round_up32(sh.k);
  bfloat16* wpk = scratch<bfloat16>(1, Np * Kp);
  pack_b_from_columns(patch, sh.k, w, patch, Np, Kp, wpk);
  tile_conv_forward_columns_packed<Tiles>(sh, x, wpk, widen_bias(bias, sh.k, 2), y, relu);
}

// B of the data gradient run as a forward convolution (backward_data_as_forward): K index
// kk = t * k + ko, column n = input channel, the filter turned 180 degrees: w[ko][taps - 1 - t][n].
inline void pack_flipped_filters(const ConvShape& sh, const bfloat16* w, int64_t Np, int64_t Kp, bfloat16* dst) {
  const int64_t taps = sh.r * sh.s, K = taps * sh.k;
  const uint16_t* src = reinterpret_cast<const uint16_t*>(w);
#pragma omp parallel for collapse(2) if (Np * Kp > (1 << 16))
  for (int64_t jb = 0; jb < Np / 16; ++jb)
    for (int64_t kk = 0; kk < Kp / 2; ++kk) {
      uint16_t* d = reinterpret_cast<uint16_t*>(dst) + jb * Kp * 16 + kk * 32;
      const int64_t cn = std::clamp<int64_t>(sh.c - jb * 16, 0, 16);
      for (int h = 0; h < 2; ++h) {
        const int64_t k = 2 * kk + h;
        const uint16_t* row = k < K ? src + ((k % sh.k) * taps + taps - 1 - k / sh.k) * sh.c + jb * 16 : nullptr;
        for (int64_t c = 0; c < 16; ++c) d[2 * c + h] = row && c < cn ? row[c] : 0;
      }
    }
}

// Data gradient: at stride 1 a forward convolution of gy (above); else the column gradient
// GY * W per chunk (W as K x patch rows, pairs along K), added back into the input pixels in
// FP32 (col2im) and rounded once. 1 x 1 filters at stride 1 need no col2im: the column
// gradient is gx.
// Scratch slots: 0 gy padded to 32 channels, 1 the packed filters, 3 the FP32 column gradient,
// 4 the chunk's FP32 input gradient.
template <class Tiles>
void tile_conv_backward_data_columns(const ConvShape& sh, const bfloat16* gy, const bfloat16* w, bfloat16* gx) {
  if (tile_backward_data_fits(sh) && !sh.pointwise()) {
    // Stride 1: a forward convolution of gy through the column route; no column gradient in
    // FP32 and no col2im. Scratch slot 1: the flipped filters.
    const ConvShape f = backward_data_as_forward(sh);
    bfloat16* wpk = scratch<bfloat16>(1, round_up32(f.k) * round_up32(f.patch()));
    pack_flipped_filters(sh, w, round_up32(f.k), round_up32(f.patch()), wpk);
    return tile_conv_forward_columns_packed<Tiles>(f, gy, wpk, nullptr, gx);
  }
  const int64_t patch = sh.patch(), Kp = round_up32(sh.k), Np = round_up32(patch), pixels = sh.out_h() * sh.out_w();
  const int64_t image = sh.h * sh.w * sh.c;
  bfloat16* wpk = scratch<bfloat16>(1, Np * Kp);
  pack_b_from_rows(sh.k, patch, w, patch, Np, Kp, wpk);
  const bool direct = sh.pointwise();  // 1 x 1, stride 1, no padding
  const int64_t chunk = tile_images_per_chunk(sh.n, pixels * (Kp * 2 + Np * 4));
  for (int64_t b0 = 0; b0 < sh.n; b0 += chunk) {
    const int64_t nb = std::min(chunk, sh.n - b0), M = nb * pixels, Mp = round_up32(M);
    bfloat16* a = scratch<bfloat16>(0, Mp * Kp);
    pack_a(false, M, sh.k, gy + b0 * pixels * sh.k, sh.k, Mp, Kp, a);
    if (direct) {
      bfloat16* gxc = gx + b0 * image;
      tile_gemm_blocks<Tiles>(Mp, Np, Kp, a, Kp, wpk, [&](int64_t i0, int64_t j0, const float* block) {
        const int64_t cn = std::min<int64_t>(32, sh.c - j0);
        for (int64_t r = 0; r < 32 && i0 + r < M; ++r) Tiles::round_row(block + r * 32, nullptr, gxc + (i0 + r) * sh.c + j0, cn);
      });
      continue;
    }
    float* gcol = scratch<float>(3, M * patch);
    tile_gemm_blocks<Tiles>(Mp, Np, Kp, a, Kp, wpk, [&](int64_t i0, int64_t j0, const float* block) {
      const int64_t cn = std::min<int64_t>(32, patch - j0);
      for (int64_t r = 0; r < 32 && i0 + r < M; ++r)
        std::memcpy(gcol + (i0 + r) * patch + j0, block + r * 32, sizeof(float) * cn);
    });
    float* acc = scratch<float>(4, nb * image);
    const int64_t oh_n = sh.out_h(), ow_n = sh.out_w();
#pragma omp parallel for if (nb > 1)
    for (int64_t b = 0; b < nb; ++b) {  // an image per thread: no two threads add into one pixel
      float* gxb = acc + b * image;
      std::fill(gxb, gxb + image, 0.f);
      for (int64_t i = 0; i < oh_n; ++i)
        for (int64_t j = 0; j < ow_n; ++j) {
          const float* row = gcol + ((b * oh_n + i) * ow_n + j) * patch;
          for (int64_t r = 0; r < sh.r; ++r) {
            const int64_t ih = i * sh.stride - sh.pad + r;
            if (ih < 0 || ih >= sh.h) continue;
            for (int64_t t = 0; t < sh.s; ++t) {
              const int64_t iw = j * sh.stride - sh.pad + t;
              if (iw < 0 || iw >= sh.w) continue;
              const float* src = row + (r * sh.s + t) * sh.c;
              float* dst = gxb + (ih * sh.w + iw) * sh.c;
              for (int64_t ch = 0; ch < sh.c; ++ch) dst[ch] += src[ch];
            }
          }
        }
      for (int64_t i = 0; i < image; i += 32)
        Tiles::round_row(gxb + i, nullptr, gx + (b0 + b) * image + i, std::min<int64_t>(32, image - i));
    }
  }
}

// im2col entries [n0, n1) of output pixel (i, j) of image b (entry kk = (r * S + s) * C + c;
// zero past the patch), in runs of channels of one tap.
inline void im2col_row_range(const ConvShape& sh, const bfloat16* x, int64_t b, int64_t i, int64_t j, int64_t n0,
                             int64_t n1, bfloat16* out) {
  const int64_t end = std::min(n1, sh.patch());
  int64_t kk = n0;
  while (kk < end) {
    const int64_t t = kk / sh.c, ci = kk % sh.c, run = std::min(sh.c - ci, end - kk);
    const int64_t ih = i * sh.stride - sh.pad + t / sh.s, iw = j * sh.stride - sh.pad + t % sh.s;
    if (ih >= 0 && ih < sh.h && iw >= 0 && iw < sh.w) std::copy_n(x + ((b * sh.h + ih) * sh.w + iw) * sh.c + ci, run, out);
    else std::fill_n(out, run, bfloat16::from_bits(0));
    out += run;
    kk += run;
  }
  std::fill_n(out, n1 - std::max(kk, n0), bfloat16::from_bits(0));
}

// A for the filter gradient: gy transposed, gyt[co][p] for co < Mp and the batch's pixels p < Kp
// (zero beyond), 32 x 32 at a time. bias_part[pb][co]: the FP32 sum of gy over pixel block pb.
template <class Tiles>
void transpose_gy_columns(const ConvShape& sh, const bfloat16* gy, int64_t P, int64_t Mp, int64_t Kp, bfloat16* gyt,
                          float* bias_part) {
  const uint16_t* src = reinterpret_cast<const uint16_t*>(gy);
#pragma omp parallel for schedule(static)
  for (int64_t pb = 0; pb < Kp / 32; ++pb) {
    alignas(64) uint16_t blk[32][32];  // [pixel][channel]
    float* bsum = bias_part ? bias_part + pb * sh.k : nullptr;
    if (bsum) std::fill(bsum, bsum + sh.k, 0.f);
    for (int64_t c0 = 0; c0 < Mp; c0 += 32) {
      const int64_t cn = std::clamp<int64_t>(sh.k - c0, 0, 32);
      for (int64_t i = 0; i < 32; ++i) {
        const int64_t p = pb * 32 + i;
        int64_t done = 0;
        if (p < P) {
          const uint16_t* row = src + p * sh.k + c0;
          std::memcpy(blk[i], row, sizeof(uint16_t) * cn);
          if (bsum)
            for (int64_t c = 0; c < cn; ++c) bsum[c0 + c] += bf16_bits_to_float(row[c]);
          done = cn;
        }
        std::memset(blk[i] + done, 0, sizeof(uint16_t) * (32 - done));
      }
      Tiles::transpose32(&blk[0][0], 32, reinterpret_cast<uint16_t*>(gyt) + c0 * Kp + pb * 32, Kp);
    }
  }
}

// Filter gradient: GW (K x patch) = GY^T * col(x) over all the batch's pixels at once. A = gy
// transposed (output channels x pixels); B = the column matrix in VNNI pairs of pixels, built
// panel by panel (a few taps' channels x at most 1024 pixels, in L2) from two im2col rows at a
// time while the block loop runs; between K chunks each block's FP32 sums wait in scratch slot 8.
// Each block is
// summed on one thread in a fixed order: the bits do not depend on the thread count.
// Scratch slots: 0 gy transposed, 1 the B panel, 3 the bias partial sums, 4 two im2col rows a
// thread (and 8, the block loop's sums).
template <class Tiles>
void tile_conv_backward_filter_columns(const ConvShape& sh, const bfloat16* x, const bfloat16* gy, bfloat16* gw,
                                       bfloat16* gbias) {
  const int64_t patch = sh.patch(), Mp = round_up32(sh.k), Np = round_up32(patch);
  const int64_t P = sh.n * sh.out_h() * sh.out_w(), Kp = round_up32(P);
  bfloat16* a = scratch<bfloat16>(0, Mp * Kp);
  float* bias_part = gbias ? scratch<float>(3, (Kp / 32) * sh.k) : nullptr;
  transpose_gy_columns<Tiles>(sh, gy, P, Mp, Kp, a, bias_part);
  bfloat16* panel = scratch<bfloat16>(1, panel_n(Np, Kp) * panel_k(Kp));
  auto fill = [&](int64_t n0, int64_t nc, int64_t k0, int64_t kc) {
    // This thread's run of the panel's pair rows, walked with a cursor over the pixels.
    const int64_t pair_rows = kc / 2, threads = team_size(), me = team_rank();
    const int64_t lo = pair_rows * me / threads, hi = pair_rows * (me + 1) / threads;
    bfloat16* two = scratch<bfloat16>(4, 2 * nc);
    PixelCursor at(sh, 0, std::min(k0 + 2 * lo, P));
    for (int64_t kk = lo; kk < hi; ++kk) {
      for (int h = 0; h < 2; ++h) {
        if (k0 + 2 * kk + h < P) {
          im2col_row_range(sh, x, at.b, at.i, at.j, n0, n0 + nc, two + h * nc);
          at.next(sh);
        } else {
          std::fill_n(two + h * nc, nc, bfloat16::from_bits(0));
        }
      }
      const uint16_t* r0 = reinterpret_cast<const uint16_t*>(two);
      const uint16_t* r1 = r0 + nc;
      for (int64_t jb = 0; jb < nc / 16; ++jb) {
        uint16_t* d = reinterpret_cast<uint16_t*>(panel) + jb * kc * 16 + kk * 32;
        for (int64_t c = 0; c < 16; ++c) {
          d[2 * c] = r0[jb * 16 + c];
          d[2 * c + 1] = r1[jb * 16 + c];
        }
      }
    }
#pragma omp barrier
    return BPanel{panel, kc * 16};
  };
  tile_gemm_panels<Tiles>(Mp, Np, Kp, a, Kp, fill, [&](int64_t i0, int64_t j0, const float* block) {
    for (int64_t r = 0; r < 32 && i0 + r < sh.k; ++r)
      for (int64_t c = 0; c < 32 && j0 + c < patch; ++c) gw[(i0 + r) * patch + j0 + c] = from_acc<bfloat16>(block[r * 32 + c]);
  });
  if (gbias) {  // the pixel blocks' FP32 sums added in order
    for (int64_t co = 0; co < sh.k; ++co) {
      float acc = 0.f;
      for (int64_t pb = 0; pb < Kp / 32; ++pb) acc += bias_part[pb * sh.k + co];
      gbias[co] = from_acc<bfloat16>(acc);
    }
  }
}

}  // namespace
}  // namespace kernels::cpu::amx

namespace kernels::cpu::amx {
namespace {

// ---- which route ------------------------------------------------------------------------------
// Padding c to 32 costs round_up32(c) / c of the flat route's work: taken up to 2x (c >= 16);
// the column route pads only the whole patch r * s * c, but its im2col rows of a few short runs
// cost more than that: 16 -> 32 channels on 16 x 16 ran 1.5-2.2x faster flat (bench_cpu_conv
// --route).
inline bool pads_well(int64_t c) { return round_up32(c) <= 2 * c; }
// The flat route where at least 60% of the pixels it computes are real: 8 x 8 images and up at
// stride 1; not stride 2, not 4 x 4 images (half of the work thrown away).
inline bool flat_route_fits(const ConvShape& sh) {
  const TileConvGeometry g = tile_conv_geometry(sh);
  return sh.groups == 1 && pads_well(sh.c) && pads_well(sh.k) && 10 * sh.out_h() * sh.out_w() >= 6 * g.qp;
}
inline bool flat_backward_data_fits(const ConvShape& sh) {
  return tile_backward_data_fits(sh) && flat_route_fits(backward_data_as_forward(sh));
}

// TileRoute::Auto picks by the rules above; Flat and Columns force one (the tests run both).
template <class Tiles>
void tile_conv2d_forward(TileRoute route, const ConvShape& sh, const bfloat16* x, const bfloat16* w, const bfloat16* bias,
                         bfloat16* y, bool relu) {
  if (route == TileRoute::Flat || (route == TileRoute::Auto && flat_route_fits(sh)))
    tile_conv_forward<Tiles>(sh, x, w, bias, y, relu);
  else
    tile_conv_forward_columns<Tiles>(sh, x, w, bias, y, relu);
}
template <class Tiles>
void tile_conv2d_backward_data(TileRoute route, const ConvShape& sh, const bfloat16* gy, const bfloat16* w, bfloat16* gx) {
  if (route == TileRoute::Flat || (route == TileRoute::Auto && flat_backward_data_fits(sh))) {
    ENGINE_CHECK(tile_backward_data_fits(sh), "the flat tile data gradient takes stride 1, square filters, pad <= r - 1");
    tile_conv_backward_data<Tiles>(sh, gy, w, gx);
  } else {
    tile_conv_backward_data_columns<Tiles>(sh, gy, w, gx);
  }
}
template <class Tiles>
void tile_conv2d_backward_filter(TileRoute route, const ConvShape& sh, const bfloat16* x, const bfloat16* gy, bfloat16* gw,
                                 bfloat16* gbias) {
  if (route == TileRoute::Flat || (route == TileRoute::Auto && flat_route_fits(sh)))
    tile_conv_backward_filter<Tiles>(sh, x, gy, gw, gbias);
  else
    tile_conv_backward_filter_columns<Tiles>(sh, x, gy, gw, gbias);
}

}  // namespace
}  // namespace kernels::cpu::amx

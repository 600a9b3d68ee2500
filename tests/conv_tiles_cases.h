// The shapes and the check shared by the tile-convolution tests (tests/test_conv_tiles.cpp on
// the emulated tiles, tests/amx/test_tiles_hw.cpp on the hardware units): each pass against the
// double reference loops of conv.h, with the bound derived below.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_tiles.h"
#include "kernels/philox.h"

namespace conv_tiles_cases {

using kernels::bfloat16;
using kernels::ConvShape;
namespace kc = kernels::cpu;

inline ConvShape shape(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t r, int64_t stride, int64_t pad) {
  ConvShape s{n, h, w, c, k, r, r};
  s.stride = stride;
  s.pad = pad;
  return s;
}

// 1, 3 and 13 channels, batch 1, widths 4-19, stride 2, 1x1 and 5x5 filters, channel counts
// that are not multiples of the tile (32) on either side, no padding and more padding than 1.
inline std::vector<ConvShape> shapes() {
  return {shape(1, 4, 4, 1, 1, 1, 1, 0),    shape(2, 5, 7, 3, 5, 3, 1, 1),   shape(1, 9, 13, 13, 20, 3, 2, 1),
          shape(2, 6, 19, 32, 33, 5, 1, 2), shape(1, 8, 8, 40, 16, 1, 2, 0), shape(2, 7, 11, 16, 48, 3, 1, 0),
          shape(1, 10, 5, 64, 31, 3, 1, 1)};
}

// Sets the tile kernels' chunk size (conv_tiles.h) for one scope.
struct ChunkBytes {
  int64_t saved = kc::amx::tile_chunk_bytes;
  explicit ChunkBytes(int64_t bytes) { kc::amx::tile_chunk_bytes = bytes; }
  ~ChunkBytes() { kc::amx::tile_chunk_bytes = saved; }
};

inline std::string describe(const ConvShape& s) {
  return "n " + std::to_string(s.n) + " h " + std::to_string(s.h) + " w " + std::to_string(s.w) + " c " +
         std::to_string(s.c) + " k " + std::to_string(s.k) + " r " + std::to_string(s.r) + " stride " +
         std::to_string(s.stride) + " pad " + std::to_string(s.pad);
}

inline std::vector<bfloat16> random_bf16(size_t n, uint64_t seed) {
  std::vector<bfloat16> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bfloat16(float(2 * kernels::philox_uniform(seed, 0, i) - 1));
  return v;
}
inline std::vector<double> widen(const std::vector<bfloat16>& v, bool magnitude = false) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = magnitude ? std::fabs(double(float(v[i]))) : double(float(v[i]));
  return d;
}

// Each result is an FP32 sum of `terms` exact BF16 products (zero padding included), so it is
// within terms * 2^-24 of the magnitude sum |x| * |w| (the standard bound, with a few roundings
// of slack for the DAZ/FTZ adds and the two-lane sums); rounding it to BF16 adds 2^-8 of itself.
inline void require_within(const std::vector<bfloat16>& got, const std::vector<double>& ref,
                           const std::vector<double>& mag, int64_t terms, const char* what) {
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double acc_err = (terms + 4) * std::ldexp(1.0, -24) * mag[i];
    const double bound = std::ldexp(1.0, -8) * (std::fabs(ref[i]) + acc_err) + acc_err;
    INFO(what << " element " << i << ": got " << float(got[i]) << ", reference " << ref[i] << ", bound " << bound);
    REQUIRE(std::fabs(double(float(got[i])) - ref[i]) <= bound);
  }
}

// Runs forward, data gradient and filter gradient on `unit` for one shape, by `route` (the flat
// route's data gradient only where it applies).
inline void check_all_passes(kc::TileUnit unit, const ConvShape& s, kc::TileRoute route) {
  INFO(kc::tile_unit_name(unit) << ", " << kc::tile_route_name(route) << " route: " << describe(s));
  const int64_t oh = s.out_h(), ow = s.out_w();
  const int64_t nx = s.n * s.h * s.w * s.c, nw = s.k * s.r * s.s * s.c, ny = s.n * oh * ow * s.k;
  const std::vector<bfloat16> x = random_bf16(nx, 101), w = random_bf16(nw, 102), bias = random_bf16(s.k, 103),
                              gy = random_bf16(ny, 104);
  const std::vector<double> xd = widen(x), wd = widen(w), bd = widen(bias), gyd = widen(gy);
  const std::vector<double> xm = widen(x, true), wm = widen(w, true), bm = widen(bias, true), gym = widen(gy, true);
  const int64_t cp = kc::amx::round_up32(s.c), kp = kc::amx::round_up32(s.k);

  {  // forward, with bias
    std::vector<bfloat16> y(ny);
    kc::conv2d_forward_bf16_tiles(unit, s, x.data(), w.data(), bias.data(), y.data(), route);
    std::vector<double> ref(ny), mag(ny);
    kc::conv2d_forward(s, xd.data(), wd.data(), bd.data(), ref.data());
    kc::conv2d_forward(s, xm.data(), wm.data(), bm.data(), mag.data());
    require_within(y, ref, mag, s.r * s.s * cp + 1, "forward");
  }
  if (route != kc::TileRoute::Flat || kc::amx::tile_backward_data_fits(s)) {
    std::vector<bfloat16> gx(nx);
    kc::conv2d_backward_data_bf16_tiles(unit, s, gy.data(), w.data(), gx.data(), route);
    std::vector<double> ref(nx), mag(nx);
    kc::conv2d_backward_data(s, gyd.data(), wd.data(), ref.data());
    kc::conv2d_backward_data(s, gym.data(), wm.data(), mag.data());
    require_within(gx, ref, mag, s.r * s.s * kp, "data gradient");
  }
  {  // filter gradient, with the bias gradient
    std::vector<bfloat16> gw(nw), gb(s.k);
    kc::conv2d_backward_filter_bf16_tiles(unit, s, x.data(), gy.data(), gw.data(), gb.data(), route);
    std::vector<double> ref(nw), mag(nw), refb(s.k), magb(s.k);
    kc::conv2d_backward_filter(s, xd.data(), gyd.data(), ref.data(), refb.data());
    kc::conv2d_backward_filter(s, xm.data(), gym.data(), mag.data(), magb.data());
    const kc::amx::TileConvGeometry g = kc::amx::tile_conv_geometry(s);
    // The flat route's sums run over n * qp pixels; the column route's over n * oh * ow <= n * qp,
    // plus one add per chunk of images (at most one chunk per image) and the tile's two lanes.
    require_within(gw, ref, mag, s.n * (g.qp + 32), "filter gradient");
    require_within(gb, refb, magb, s.n * oh * ow, "bias gradient");
  }
}

}  // namespace conv_tiles_cases

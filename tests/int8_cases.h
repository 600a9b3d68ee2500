// The INT8 kernels' cases, shared by engine_tests (the portable path and the emulated AMX tiles)
// and engine_int8_hw_tests (AVX512-VNNI, AVX-VNNI, AMX): each convolution and product against a plain integer loop, the s32
// sums exactly and the requantized bytes bit for bit, the epilogue written out here from
// kernels/cpu/int8_gemm.h's formula.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "catch2/catch.hpp"
#include "kernels/cpu/int8_gemm.h"

namespace int8_cases {

namespace k8 = kernels::cpu::int8;

struct Rng {
  uint64_t state;
  uint32_t next() {  // splitmix64's output, 32 bits
    state += 0x9e3779b97f4a7c15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<uint32_t>((z ^ (z >> 31)) >> 16);
  }
  int between(int lo, int hi) { return lo + static_cast<int>(next() % static_cast<uint32_t>(hi - lo + 1)); }
};

// The epilogue as int8_gemm.h states it, for one output.
inline int32_t reference_requant(int32_t sum, int64_t j, const k8::Requant& e, int32_t residual) {
  const int32_t s = sum + (e.correction ? e.correction[j] : 0);
  float f = std::fma(static_cast<float>(s), e.multiplier[j], e.offset[j]);
  if (e.residual) f = std::fma(static_cast<float>(residual - e.residual_zero_point), e.residual_multiplier, f);
  const int32_t qmin = e.out_signed ? -128 : 0, qmax = e.out_signed ? 127 : 255;
  float lo = static_cast<float>(qmin - e.zero_point), hi = static_cast<float>(qmax - e.zero_point);
  if (e.relu) lo = 0;
  if (!(f >= lo)) f = lo;  // a NaN too
  if (f > hi) f = hi;
  return static_cast<int32_t>(std::nearbyint(f)) + e.zero_point;
}

struct Epilogue {
  std::vector<int32_t> correction;
  std::vector<float> multiplier, offset;
  std::vector<uint8_t> residual;
  k8::Requant ep;
  // Per-channel terms that put typical sums over a few output steps, some outputs clamped. The
  // residual's rows are `ld` bytes apart, as the output's (default n).
  Epilogue(Rng& rng, int64_t rows, int64_t n, int64_t k, bool with_residual, bool relu, bool out_signed,
           int64_t ld = 0) {
    correction.resize(n), multiplier.resize(n), offset.resize(n);
    for (int64_t j = 0; j < n; ++j) {
      correction[j] = rng.between(-20000, 20000);
      multiplier[j] = static_cast<float>(rng.between(1, 1000)) / (300.f * static_cast<float>(k) * 40.f);
      offset[j] = static_cast<float>(rng.between(-4000, 4000)) / 37.f;
    }
    ep.correction = correction.data(), ep.multiplier = multiplier.data(), ep.offset = offset.data();
    ep.relu = relu, ep.out_signed = out_signed, ep.zero_point = out_signed ? 0 : rng.between(0, 40);
    if (with_residual) {
      residual.resize(static_cast<size_t>(rows * (ld > 0 ? ld : n)));
      for (auto& r : residual) r = static_cast<uint8_t>(rng.next());
      ep.residual = residual.data();
      ep.residual_signed = rng.next() % 2 == 0;
      ep.residual_zero_point = ep.residual_signed ? 0 : rng.between(0, 255);
      ep.residual_multiplier = static_cast<float>(rng.between(1, 300)) / 97.f;
    }
  }
  // The first channels' multipliers NaN, +inf and -inf (a damaged scale that got past the file
  // checks): every path must clamp them as the reference does (a NaN to the low end).
  void make_nonfinite() {
    const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                             -std::numeric_limits<float>::infinity()};
    for (size_t j = 0; j < multiplier.size() && j < 3; ++j) multiplier[j] = special[j];
  }
  // ld: the residual's row stride (the output's).
  int32_t residual_at(int64_t m, int64_t ld, int64_t j) const {
    if (!ep.residual) return 0;
    const uint8_t b = residual[static_cast<size_t>(m * ld + j)];
    return ep.residual_signed ? static_cast<int8_t>(b) : b;
  }
};

struct ConvCase {
  int64_t batch, height, width, cin, cout, kernel, stride, pad;
};

// 1, 3 and 13 channels, batch 1, odd widths, stride 2, 1x1 and 5x5, K (= kernel^2 * cin) not a
// multiple of 4 or of 64, more outputs than one 64-wide block. Each route: gathered windows
// (channels not in quads), windows read from the padded copy (with and without padding, strides
// 1, 2, 3), and 1x1 stride-1 rows read in place.
inline const std::vector<ConvCase>& conv_cases() {
  static const std::vector<ConvCase> cases = {
      {1, 5, 7, 1, 3, 3, 1, 1},    {2, 9, 11, 3, 13, 3, 2, 1},  {1, 8, 9, 13, 17, 5, 1, 2},
      {3, 6, 6, 16, 64, 1, 1, 0},  {2, 7, 7, 20, 70, 1, 2, 0},  {1, 4, 5, 67, 33, 3, 1, 1},
      {1, 3, 5, 64, 129, 3, 1, 1}, {2, 10, 6, 8, 16, 5, 2, 2},  {1, 13, 13, 3, 1, 3, 1, 0},
      {4, 5, 5, 12, 200, 1, 1, 0}, {1, 9, 9, 8, 20, 3, 2, 0},    {2, 8, 8, 4, 16, 2, 2, 0},
      {1, 10, 10, 12, 40, 3, 3, 1}, {2, 7, 9, 16, 48, 3, 1, 1},
      // The first convolution as Int8Net feeds it (3 channels padded to 4, 16 outputs): the
      // padded-input route in 24-row tiles of one vector.
      {2, 12, 11, 4, 16, 3, 1, 1},
  };
  return cases;
}

// Each case three times: raw s32 sums, then uint8 out with ReLU and a residual, then int8 out.
inline void check_conv(k8::Int8Path path) {
  Rng rng{42};
  for (const ConvCase& c : conv_cases()) {
    const int64_t k = c.kernel * c.kernel * c.cin;
    k8::ConvGeometry g;
    g.batch = c.batch, g.height = c.height, g.width = c.width, g.in_channels = c.cin;
    g.kernel = c.kernel, g.stride = c.stride, g.pad = c.pad;
    const int64_t oh = g.out_height(), ow = g.out_width(), rows = c.batch * oh * ow;
    std::vector<uint8_t> x(static_cast<size_t>(c.batch * c.height * c.width * c.cin));
    for (auto& v : x) v = static_cast<uint8_t>(rng.next());
    std::vector<int8_t> w(static_cast<size_t>(c.cout * k));
    for (auto& v : w) v = static_cast<int8_t>(rng.next());  // the whole range, -128 included
    const uint8_t zp = static_cast<uint8_t>(rng.between(0, 255));
    const k8::PackedWeights packed = k8::pack_weights(w.data(), c.cout, k, path);
    // The plain loop: every window position, the zero point outside the image.
    std::vector<int32_t> want(static_cast<size_t>(rows * c.cout));
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t j = 0; j < c.cout; ++j) {
            int32_t s = 0;
            for (int64_t ky = 0; ky < c.kernel; ++ky)
              for (int64_t kx = 0; kx < c.kernel; ++kx)
                for (int64_t ci = 0; ci < c.cin; ++ci) {
                  const int64_t iy = oy * c.stride - c.pad + ky, ix = ox * c.stride - c.pad + kx;
                  const bool inside = iy >= 0 && iy < c.height && ix >= 0 && ix < c.width;
                  const int32_t xv = inside ? x[static_cast<size_t>(((b * c.height + iy) * c.width + ix) * c.cin + ci)] : zp;
                  s += xv * w[static_cast<size_t>(j * k + (ky * c.kernel + kx) * c.cin + ci)];
                }
            want[static_cast<size_t>(((b * oh + oy) * ow + ox) * c.cout + j)] = s;
          }
    INFO("conv " << c.batch << "x" << c.height << "x" << c.width << "x" << c.cin << " -> " << c.cout << ", "
                 << c.kernel << "x" << c.kernel << " stride " << c.stride << " pad " << c.pad << ", path "
                 << k8::int8_path_name(path));
    std::vector<int32_t> sums(want.size());
    k8::conv2d_u8s8(path, x.data(), zp, g, packed, nullptr, sums.data());
    REQUIRE(sums == want);
    // uint8 out with ReLU and residual; int8 out; uint8 out without ReLU, with residual. The
    // last two with non-finite multipliers in their first channels.
    for (int variant = 0; variant < 3; ++variant) {
      const bool out_signed = variant == 1;
      Epilogue e(rng, rows, c.cout, k, !out_signed, variant == 0, out_signed);
      if (variant > 0) e.make_nonfinite();
      std::vector<uint8_t> got(want.size());
      k8::conv2d_u8s8(path, x.data(), zp, g, packed, &e.ep, got.data());
      int64_t wrong = 0;
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t j = 0; j < c.cout; ++j) {
          const int32_t r = reference_requant(want[static_cast<size_t>(m * c.cout + j)], j, e.ep, e.residual_at(m, c.cout, j));
          const uint8_t byte = static_cast<uint8_t>(out_signed ? static_cast<uint8_t>(static_cast<int8_t>(r)) : r);
          wrong += got[static_cast<size_t>(m * c.cout + j)] != byte;
        }
      INFO((variant == 0 ? "uint8 output, ReLU, residual"
                         : variant == 1 ? "int8 output, NaN/inf multipliers" : "uint8 output, residual, NaN/inf multipliers"));
      CHECK(wrong == 0);
    }
  }
}

// Products with rows 1 to 128, K from 1 to 130 (row stride above K in some), 1 to 130 outputs,
// output rows wider than n in some: the bytes past n (sentinels) must stay untouched.
inline void check_gemm_cases(k8::Int8Path path) {
  Rng rng{7};
  const int64_t shapes[][5] = {{1, 1, 1, 1, 1},       {5, 3, 10, 3, 13},    {50, 13, 16, 20, 16},
                               {97, 64, 33, 64, 40},  {48, 67, 130, 67, 130}, {7, 130, 64, 136, 64},
                               {49, 256, 10, 256, 10}, {128, 40, 24, 40, 27}, {100, 9, 17, 9, 17}};
  constexpr uint8_t kSentinel = 0xA5;
  for (const auto& sh : shapes) {
    const int64_t rows = sh[0], k = sh[1], n = sh[2], lda = sh[3], ldo = sh[4];
    std::vector<uint8_t> a(static_cast<size_t>(rows * lda));
    for (auto& v : a) v = static_cast<uint8_t>(rng.next());
    std::vector<int8_t> w(static_cast<size_t>(n * k));
    for (auto& v : w) v = static_cast<int8_t>(rng.next());
    const k8::PackedWeights packed = k8::pack_weights(w.data(), n, k, path);
    std::vector<int32_t> want(static_cast<size_t>(rows * n));
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t j = 0; j < n; ++j) {
        int32_t s = 0;
        for (int64_t i = 0; i < k; ++i) s += a[static_cast<size_t>(m * lda + i)] * w[static_cast<size_t>(j * k + i)];
        want[static_cast<size_t>(m * n + j)] = s;
      }
    INFO("gemm " << rows << " x " << k << " x " << n << " (row strides " << lda << " in, " << ldo << " out), path "
                 << k8::int8_path_name(path));
    constexpr int32_t kSentinelSum = -123456789;
    std::vector<int32_t> sums(static_cast<size_t>(rows * ldo), kSentinelSum);
    k8::gemm_u8s8(path, a.data(), rows, lda, packed, nullptr, sums.data(), ldo);
    int64_t wrong_sums = 0, overwritten = 0;
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t j = 0; j < ldo; ++j) {
        const int32_t got = sums[static_cast<size_t>(m * ldo + j)];
        if (j < n) wrong_sums += got != want[static_cast<size_t>(m * n + j)];
        else overwritten += got != kSentinelSum;
      }
    CHECK(wrong_sums == 0);
    CHECK(overwritten == 0);
    Epilogue e(rng, rows, n, k, true, true, false, ldo);
    std::vector<uint8_t> got(static_cast<size_t>(rows * ldo), kSentinel);
    k8::gemm_u8s8(path, a.data(), rows, lda, packed, &e.ep, got.data(), ldo);
    int64_t wrong = 0;
    overwritten = 0;
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t j = 0; j < ldo; ++j) {
        const uint8_t byte = got[static_cast<size_t>(m * ldo + j)];
        if (j < n)
          wrong += byte != reference_requant(want[static_cast<size_t>(m * n + j)], j, e.ep, e.residual_at(m, ldo, j));
        else
          overwritten += byte != kSentinel;
      }
    CHECK(wrong == 0);
    CHECK(overwritten == 0);
    // int8 output without ReLU, non-finite multipliers in the first channels.
    Epilogue s8(rng, rows, n, k, false, false, true, ldo);
    s8.make_nonfinite();
    k8::gemm_u8s8(path, a.data(), rows, lda, packed, &s8.ep, got.data(), ldo);
    wrong = 0;
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t j = 0; j < n; ++j)
        wrong += static_cast<int8_t>(got[static_cast<size_t>(m * ldo + j)]) !=
                 reference_requant(want[static_cast<size_t>(m * n + j)], j, s8.ep, 0);
    CHECK(wrong == 0);
  }
}

// The cases at several thread counts: the rows are cut into chunks by the team's size (1-row
// chunks where there are fewer rows than threads).
inline void check_gemm(k8::Int8Path path) {
#if defined(_OPENMP)
  struct Restore {
    int threads = omp_get_max_threads();
    ~Restore() { omp_set_num_threads(threads); }
  } restore;
  for (const int t : {1, 3, 5, 16}) {
    omp_set_num_threads(t);
    INFO(t << " threads");
    check_gemm_cases(path);
  }
#endif
  check_gemm_cases(path);
}

}  // namespace int8_cases

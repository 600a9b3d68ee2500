// Forward and backward of the CPU ops against naive reference loops written here in double
// (conv2d, linear, pooling, batch-norm, cross-entropy, cast, dropout, element-wise), per dtype.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "catch2/catch.hpp"
#include "engine/ops.h"
#include "engine/tape.h"
#include "engine/tensor.h"
#include "kernels/convert.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_implicit.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/scratch.h"
#include "kernels/element_math.h"

namespace {

using engine::DType;
using engine::Shape;
using engine::Tape;
using engine::TapeScope;
using engine::Tensor;
using Vec = std::vector<double>;

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- Independent rounding and error bounds ---------------------------------------------------

// Round v to the binary format of dtype t with ties to even, written from the definition:
// quantum 2^(max(e, emin) - mantissa bits) at v's binade, nearbyint (default mode: ties to
// even), overflow to inf once past the largest finite value. Identity for F64.
double round_to(double v, DType t) {
  int man, emin;
  double maxv;
  switch (t) {
    case DType::F16: man = 10; emin = -14; maxv = 65504.0; break;
    case DType::BF16: man = 7; emin = -126; maxv = std::ldexp(255.0, 120); break;
    case DType::F32: man = 23; emin = -126; maxv = std::ldexp(16777215.0, 104); break;
    default: return v;
  }
  if (std::isnan(v) || std::isinf(v) || v == 0) return v;
  int e;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const int q = std::max(e - 1, emin) - man;
  const double r = std::ldexp(std::nearbyint(std::ldexp(v, -q)), q);
  return std::fabs(r) > maxv ? std::copysign(kInf, v) : r;
}

// Unit roundoff of the type the engine accumulates in: FP32 for FP32/FP16/BF16, FP64 for FP64.
double acc_unit(DType t) { return t == DType::F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

// Counts failures inside big loops and reports the first few in one assertion.
struct Failures {
  int count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ < 4) first += what + "\n";
  }
};

// Checks got[i] against a reference computed in double from the same (rounded) inputs. The
// engine accumulates in FP32 (FP64) with an error of at most err[i], then rounds once to the
// storage dtype; rounding is monotonic, so the result must lie in
// [round(ref - err), round(ref + err)]. For FP16/BF16 that is "within one rounding plus the
// accumulation error"; for FP32 the final rounding is the accumulator's own, covered by err.
void expect_close(const char* what, const Vec& got, const Vec& ref, const Vec& err, DType t) {
  REQUIRE(got.size() == ref.size());
  Failures f;
  for (size_t i = 0; i < got.size(); ++i) {
    const double lo = round_to(ref[i] - err[i], t), hi = round_to(ref[i] + err[i], t);
    if (!(got[i] >= lo && got[i] <= hi)) {
      std::ostringstream os;
      os.precision(17);
      os << what << "[" << i << "] = " << got[i] << ", reference " << ref[i] << ", allowed [" << lo << ", " << hi << "]";
      f.add(os.str());
    }
  }
  INFO(f.first);
  CHECK(f.count == 0);
}

// Exact comparison (NaN equals NaN).
void expect_equal(const char* what, const Vec& got, const Vec& ref) {
  REQUIRE(got.size() == ref.size());
  Failures f;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same = (std::isnan(got[i]) && std::isnan(ref[i])) || got[i] == ref[i];
    if (!same) {
      std::ostringstream os;
      os.precision(17);
      os << what << "[" << i << "] = " << got[i] << ", expected " << ref[i];
      f.add(os.str());
    }
  }
  INFO(f.first);
  CHECK(f.count == 0);
}

Vec random_vec(std::mt19937& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// A tensor of dtype t from doubles; `exact` receives the values it actually holds.
Tensor make(const Vec& v, const Shape& s, DType t, Vec* exact = nullptr) {
  Tensor x = Tensor::from_vector(v, s, t);
  if (exact) *exact = x.to_vector();
  return x;
}

const char* name(DType t) { return engine::dtype_name(t); }

// ---- conv2d ----------------------------------------------------------------------------------

struct ConvCase {
  int64_t n, h, w, c, k, r, s, stride, pad;
  bool bias;
};

struct ConvRef {
  Vec y, y_err, gx, gx_err, gw, gw_err, gb, gb_err;
};

// Direct convolution and its adjoints in double, NHWC / KRSC. Beside each value it sums the
// magnitudes of the terms (S) and counts them (m); an FP32 (FP64) accumulation of m terms in
// any order is off by at most (m + 1) u S, so err = (m + 2) u S, u the accumulator's roundoff.
ConvRef naive_conv(const ConvCase& cc, const Vec& x, const Vec& w, const Vec& b, const Vec& gy, double u) {
  const int64_t oh = (cc.h + 2 * cc.pad - cc.r) / cc.stride + 1, ow = (cc.w + 2 * cc.pad - cc.s) / cc.stride + 1;
  auto xi = [&](int64_t n, int64_t i, int64_t j, int64_t c) { return ((n * cc.h + i) * cc.w + j) * cc.c + c; };
  auto wi = [&](int64_t k, int64_t r, int64_t s, int64_t c) { return ((k * cc.r + r) * cc.s + s) * cc.c + c; };
  auto yi = [&](int64_t n, int64_t i, int64_t j, int64_t k) { return ((n * oh + i) * ow + j) * cc.k + k; };
  const size_t ny = static_cast<size_t>(cc.n * oh * ow * cc.k);
  ConvRef R;
  R.y.assign(ny, 0);
  R.gx.assign(x.size(), 0);
  R.gw.assign(w.size(), 0);
  R.gb.assign(static_cast<size_t>(cc.k), 0);
  Vec sy(ny, 0), sx(x.size(), 0), sw(w.size(), 0), sb(R.gb.size(), 0);
  Vec my(ny, 0), mx(x.size(), 0), mw(w.size(), 0), mb(R.gb.size(), 0);
  for (int64_t n = 0; n < cc.n; ++n)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t k = 0; k < cc.k; ++k) {
          const size_t o = static_cast<size_t>(yi(n, i, j, k));
          if (cc.bias) {
            R.y[o] += b[k];
            sy[o] += std::fabs(b[k]);
            my[o] += 1;
          }
          R.gb[k] += gy[o];
          sb[k] += std::fabs(gy[o]);
          mb[k] += 1;
          for (int64_t r = 0; r < cc.r; ++r)
            for (int64_t s = 0; s < cc.s; ++s) {
              const int64_t ih = i * cc.stride - cc.pad + r, iw = j * cc.stride - cc.pad + s;
              if (ih < 0 || ih >= cc.h || iw < 0 || iw >= cc.w) continue;
              for (int64_t c = 0; c < cc.c; ++c) {
                const size_t a = static_cast<size_t>(xi(n, ih, iw, c)), q = static_cast<size_t>(wi(k, r, s, c));
                R.y[o] += x[a] * w[q];
                sy[o] += std::fabs(x[a] * w[q]);
                my[o] += 1;
                R.gx[a] += gy[o] * w[q];
                sx[a] += std::fabs(gy[o] * w[q]);
                mx[a] += 1;
                R.gw[q] += gy[o] * x[a];
                sw[q] += std::fabs(gy[o] * x[a]);
                mw[q] += 1;
              }
            }
        }
  auto bound = [u](const Vec& s, const Vec& m) {
    Vec e(s.size());
    for (size_t i = 0; i < s.size(); ++i) e[i] = (m[i] + 2) * u * s[i];
    return e;
  };
  R.y_err = bound(sy, my);
  R.gx_err = bound(sx, mx);
  R.gw_err = bound(sw, mw);
  R.gb_err = bound(sb, mb);
  return R;
}

const ConvCase kConvCases[] = {
    {1, 5, 7, 3, 4, 3, 3, 1, 1, true},   // 3x3 "same"
    {3, 5, 7, 5, 2, 1, 1, 1, 0, false},  // pointwise, batch 3
    {3, 5, 7, 3, 4, 5, 5, 2, 2, true},   // 5x5, stride 2, pad 2
    {1, 7, 5, 5, 3, 3, 1, 3, 0, true},   // 3x1 kernel, stride 3
    {3, 5, 7, 3, 2, 3, 3, 2, 0, false},  // stride 2, no padding (last column unused)
    {1, 5, 7, 5, 3, 1, 1, 2, 1, true},   // 1x1 with stride and padding
    {3, 6, 5, 3, 5, 3, 3, 3, 2, true},   // stride 3, pad 2
};

void run_conv_case(const ConvCase& cc, DType t, std::mt19937& rng) {
  INFO("dtype " << name(t) << ", x [" << cc.n << "," << cc.h << "," << cc.w << "," << cc.c << "], w [" << cc.k << ","
                << cc.r << "," << cc.s << "," << cc.c << "], stride " << cc.stride << ", pad " << cc.pad
                << (cc.bias ? ", bias" : ", no bias"));
  const int64_t oh = (cc.h + 2 * cc.pad - cc.r) / cc.stride + 1, ow = (cc.w + 2 * cc.pad - cc.s) / cc.stride + 1;
  Vec xv, wv, bv, gyv;
  Tensor x = make(random_vec(rng, static_cast<size_t>(cc.n * cc.h * cc.w * cc.c), -1, 1), {cc.n, cc.h, cc.w, cc.c}, t, &xv);
  Tensor w = make(random_vec(rng, static_cast<size_t>(cc.k * cc.r * cc.s * cc.c), -1, 1), {cc.k, cc.r, cc.s, cc.c}, t, &wv);
  Tensor b;
  if (cc.bias) b = make(random_vec(rng, static_cast<size_t>(cc.k), -1, 1), {cc.k}, t, &bv);
  Tensor gy = make(random_vec(rng, static_cast<size_t>(cc.n * oh * ow * cc.k), -1, 1), {cc.n, oh, ow, cc.k}, t, &gyv);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  if (cc.bias) b.set_requires_grad(true);

  Tape tape;
  Tensor y;
  {
    TapeScope scope(tape);
    y = engine::conv2d(x, w, b, cc.stride, cc.pad);
  }
  REQUIRE(y.shape() == Shape{cc.n, oh, ow, cc.k});
  REQUIRE(y.dtype() == t);
  tape.backward(y, gy);

  const ConvRef R = naive_conv(cc, xv, wv, bv, gyv, acc_unit(t));
  expect_close("y", y.to_vector(), R.y, R.y_err, t);
  REQUIRE(x.grad().defined());
  REQUIRE(w.grad().defined());
  REQUIRE(x.grad().dtype() == t);
  expect_close("grad x", x.grad().to_vector(), R.gx, R.gx_err, t);
  expect_close("grad w", w.grad().to_vector(), R.gw, R.gw_err, t);
  if (cc.bias) {
    REQUIRE(b.grad().defined());
    expect_close("grad bias", b.grad().to_vector(), R.gb, R.gb_err, t);
  }
}

TEST_CASE("conv2d forward and backward match a direct double convolution", "[ref]") {
  std::mt19937 rng(1234);
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    for (const ConvCase& cc : kConvCases) run_conv_case(cc, t, rng);
}

// Shapes the implicit-GEMM kernels (kernels/cpu/conv_implicit.h) take: output channels whole
// SIMD vectors (16 is one AVX-512 vector, two AVX2 ones), 3-channel input, widths that split
// into unequal pixel tiles, stride 2, 5x5 and 2x2 filters, no padding, more than 16 images
// (several filter-gradient blocks), batch 1.
const ConvCase kImplicitConvCases[] = {
    {2, 7, 9, 3, 16, 3, 3, 1, 1, true},     // the first layer's shape: 3 channels in
    {1, 6, 5, 16, 32, 3, 3, 1, 1, true},    // 16 -> 32, all three kernels implicit
    {3, 9, 7, 16, 16, 3, 3, 2, 1, false},   // stride 2 (the data gradient: im2col)
    {2, 5, 19, 16, 16, 5, 5, 1, 2, true},   // 5x5, 19 columns: two unequal tiles
    {1, 4, 4, 16, 48, 3, 3, 1, 0, true},    // no padding, 48 outputs (odd number of vectors)
    {1, 5, 5, 32, 16, 2, 2, 1, 1, false},   // even filter, pad = R - 1
    {37, 3, 4, 16, 16, 3, 3, 1, 1, true},   // 37 images: 13 filter-gradient blocks of 3
    {1, 5, 7, 16, 16, 1, 1, 1, 1, true},    // 1x1 with padding (the data gradient: im2col)
    {2, 6, 5, 1, 16, 3, 3, 1, 1, true},     // one input channel
};

TEST_CASE("implicit-GEMM conv2d matches a direct double convolution", "[ref]") {
  using kernels::ConvShape;
  int forward = 0, data = 0, filter = 0;
  for (const ConvCase& cc : kImplicitConvCases) {
    ConvShape sh;
    sh.n = cc.n, sh.h = cc.h, sh.w = cc.w, sh.c = cc.c, sh.k = cc.k, sh.r = cc.r, sh.s = cc.s;
    sh.stride = cc.stride, sh.pad = cc.pad;
    forward += kernels::cpu::implicit_forward_fits(sh);
    data += kernels::cpu::implicit_backward_data_fits(sh);
    filter += kernels::cpu::implicit_backward_filter_fits(sh);
  }
  // The cases above do reach the implicit kernels (else this would test im2col again).
  CHECK(forward == 9);
  CHECK(data == 5);
  CHECK(filter == 9);
  std::mt19937 rng(4321);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (const ConvCase& cc : kImplicitConvCases) run_conv_case(cc, t, rng);
}

TEST_CASE("conv2d of an empty batch gives empty outputs and zero filter gradients", "[ref]") {
  // A shape the implicit kernels take once it has images; with none, nothing may divide by
  // the batch (the filter gradient's blocks) and the gradients must be exact zeros.
  const kernels::ConvShape sh{0, 4, 4, 16, 16, 3, 3, 1, 1};
  const std::vector<float> w(static_cast<size_t>(sh.k * sh.patch()), 0.5f), b(static_cast<size_t>(sh.k), 0.5f);
  std::vector<float> gw(w.size(), 7.0f), gb(b.size(), 7.0f);
  const float* none = nullptr;
  float* none_out = nullptr;
  kernels::cpu::conv2d_forward(sh, none, w.data(), b.data(), none_out);
  kernels::cpu::conv2d_backward_data(sh, none, w.data(), none_out);
  kernels::cpu::conv2d_backward_filter(sh, none, none, gw.data(), gb.data());
  CHECK(std::all_of(gw.begin(), gw.end(), [](float v) { return v == 0.0f; }));
  CHECK(std::all_of(gb.begin(), gb.end(), [](float v) { return v == 0.0f; }));
}

TEST_CASE("implicit-GEMM conv2d gives the same bits with one thread and with two", "[ref]") {
  // The filter gradient sums fixed blocks of images in a fixed order; the forward and data
  // gradient split only whole output rows. So the thread count must not change a bit.
  const kernels::ConvShape sh{40, 6, 7, 16, 32, 3, 3, 1, 1};
  std::mt19937 rng(7);
  const auto fill = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& e : v) e = d(rng);
    return v;
  };
  const std::vector<float> x = fill(sh.n * sh.h * sh.w * sh.c), w = fill(sh.k * sh.patch()), b = fill(sh.k);
  const std::vector<float> gy = fill(sh.n * sh.out_h() * sh.out_w() * sh.k);
  struct Out {
    std::vector<float> y, gx, gw, gb;
  };
  const auto run = [&](int threads) {
    Out o{std::vector<float>(gy.size()), std::vector<float>(x.size()), std::vector<float>(w.size()), std::vector<float>(b.size())};
#if defined(_OPENMP)
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
#endif
    kernels::cpu::conv2d_forward_implicit(sh, x.data(), w.data(), b.data(), o.y.data());
    kernels::cpu::conv2d_backward_data_implicit(sh, gy.data(), w.data(), o.gx.data());
    kernels::cpu::conv2d_backward_filter_implicit(sh, x.data(), gy.data(), o.gw.data(), o.gb.data());
#if defined(_OPENMP)
    omp_set_num_threads(before);
#endif
    return o;
  };
  const Out one = run(1), two = run(2);
  CHECK(std::memcmp(one.y.data(), two.y.data(), sizeof(float) * one.y.size()) == 0);
  CHECK(std::memcmp(one.gx.data(), two.gx.data(), sizeof(float) * one.gx.size()) == 0);
  CHECK(std::memcmp(one.gw.data(), two.gw.data(), sizeof(float) * one.gw.size()) == 0);
  CHECK(std::memcmp(one.gb.data(), two.gb.data(), sizeof(float) * one.gb.size()) == 0);
}

TEST_CASE("conv2d error bound is tight enough to catch a half-precision accumulator", "[ref]") {
  // Guards the test itself: the FP16 bound must reject a result accumulated in FP16
  // (each partial sum rounded) for a long enough reduction.
  std::mt19937 rng(99);
  const int64_t c = 64;
  Vec x = random_vec(rng, static_cast<size_t>(c), 0.5, 1), w = random_vec(rng, static_cast<size_t>(c), 0.5, 1);
  for (double& v : x) v = round_to(v, DType::F16);
  for (double& v : w) v = round_to(v, DType::F16);
  double exact = 0, s = 0, in_half = 0;
  for (int64_t i = 0; i < c; ++i) {
    exact += x[i] * w[i];
    s += std::fabs(x[i] * w[i]);
    in_half = round_to(in_half + round_to(x[i] * w[i], DType::F16), DType::F16);
  }
  const double err = (c + 2) * acc_unit(DType::F16) * s;
  const bool accepted = in_half >= round_to(exact - err, DType::F16) && in_half <= round_to(exact + err, DType::F16);
  CHECK_FALSE(accepted);
  // ... while the engine's result for the same dot product is accepted.
  Tensor xt = Tensor::from_vector(x, {1, 1, 1, c}, DType::F16), wt = Tensor::from_vector(w, {1, 1, 1, c}, DType::F16);
  expect_close("y", engine::conv2d(xt, wt, Tensor()).to_vector(), {exact}, {err}, DType::F16);
}

// ---- linear ----------------------------------------------------------------------------------

TEST_CASE("linear forward and backward match a naive triple loop", "[ref]") {
  struct Case {
    int64_t n, in, out;
    bool bias;
  };
  const Case cases[] = {{3, 7, 5, true}, {1, 1, 3, true}, {4, 33, 9, false}, {5, 16, 1, true}};
  std::mt19937 rng(42);
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    for (const Case& c : cases) {
      INFO("dtype " << name(t) << ", x [" << c.n << "," << c.in << "], w [" << c.out << "," << c.in << "]"
                    << (c.bias ? ", bias" : ""));
      Vec xv, wv, bv, gyv;
      Tensor x = make(random_vec(rng, static_cast<size_t>(c.n * c.in), -2, 2), {c.n, c.in}, t, &xv);
      Tensor w = make(random_vec(rng, static_cast<size_t>(c.out * c.in), -1, 1), {c.out, c.in}, t, &wv);
      Tensor b;
      if (c.bias) b = make(random_vec(rng, static_cast<size_t>(c.out), -1, 1), {c.out}, t, &bv);
      Tensor gy = make(random_vec(rng, static_cast<size_t>(c.n * c.out), -1, 1), {c.n, c.out}, t, &gyv);
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      if (c.bias) b.set_requires_grad(true);
      Tape tape;
      Tensor y;
      {
        TapeScope scope(tape);
        y = engine::linear(x, w, b);
      }
      REQUIRE(y.shape() == Shape{c.n, c.out});
      tape.backward(y, gy);

      // y[n,o] = b[o] + sum_i x[n,i] w[o,i]; gx[n,i] = sum_o gy[n,o] w[o,i];
      // gw[o,i] = sum_n gy[n,o] x[n,i]; gb[o] = sum_n gy[n,o]. Bounds as for conv2d.
      const double u = acc_unit(t);
      Vec y_ref(static_cast<size_t>(c.n * c.out)), y_err(y_ref.size());
      Vec gx_ref(xv.size()), gx_err(xv.size()), gw_ref(wv.size()), gw_err(wv.size());
      Vec gb_ref(static_cast<size_t>(c.out)), gb_err(static_cast<size_t>(c.out));
      for (int64_t n = 0; n < c.n; ++n)
        for (int64_t o = 0; o < c.out; ++o) {
          double acc = c.bias ? bv[o] : 0, s = c.bias ? std::fabs(bv[o]) : 0;
          for (int64_t i = 0; i < c.in; ++i) {
            acc += xv[n * c.in + i] * wv[o * c.in + i];
            s += std::fabs(xv[n * c.in + i] * wv[o * c.in + i]);
          }
          y_ref[n * c.out + o] = acc;
          y_err[n * c.out + o] = (c.in + 3) * u * s;
        }
      for (int64_t n = 0; n < c.n; ++n)
        for (int64_t i = 0; i < c.in; ++i) {
          double acc = 0, s = 0;
          for (int64_t o = 0; o < c.out; ++o) {
            acc += gyv[n * c.out + o] * wv[o * c.in + i];
            s += std::fabs(gyv[n * c.out + o] * wv[o * c.in + i]);
          }
          gx_ref[n * c.in + i] = acc;
          gx_err[n * c.in + i] = (c.out + 2) * u * s;
        }
      for (int64_t o = 0; o < c.out; ++o) {
        double sb = 0, ab = 0;
        for (int64_t n = 0; n < c.n; ++n) {
          ab += gyv[n * c.out + o];
          sb += std::fabs(gyv[n * c.out + o]);
        }
        gb_ref[o] = ab;
        gb_err[o] = (c.n + 2) * u * sb;
        for (int64_t i = 0; i < c.in; ++i) {
          double acc = 0, s = 0;
          for (int64_t n = 0; n < c.n; ++n) {
            acc += gyv[n * c.out + o] * xv[n * c.in + i];
            s += std::fabs(gyv[n * c.out + o] * xv[n * c.in + i]);
          }
          gw_ref[o * c.in + i] = acc;
          gw_err[o * c.in + i] = (c.n + 2) * u * s;
        }
      }
      expect_close("y", y.to_vector(), y_ref, y_err, t);
      expect_close("grad x", x.grad().to_vector(), gx_ref, gx_err, t);
      expect_close("grad w", w.grad().to_vector(), gw_ref, gw_err, t);
      if (c.bias) expect_close("grad bias", b.grad().to_vector(), gb_ref, gb_err, t);
    }
  }
}

// ---- max_pool2d ------------------------------------------------------------------------------

// Naive max-pool: value and the input index (within the image, ih*W + iw) of the first maximum
// in row-major window order; padding never wins; a NaN wins over everything and the first NaN
// stays (as torch.max_pool2d propagates NaN).
void naive_maxpool(const Vec& x, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t st, int64_t pad,
                   Vec& y, std::vector<int64_t>& at) {
  const int64_t oh = (h + 2 * pad - k) / st + 1, ow = (w + 2 * pad - k) / st + 1;
  y.assign(static_cast<size_t>(n * oh * ow * c), 0);
  at.assign(y.size(), -1);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t ch = 0; ch < c; ++ch) {
          const size_t o = static_cast<size_t>(((b * oh + i) * ow + j) * c + ch);
          for (int64_t r = 0; r < k; ++r)
            for (int64_t q = 0; q < k; ++q) {
              const int64_t ih = i * st - pad + r, iw = j * st - pad + q;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              const double v = x[static_cast<size_t>(((b * h + ih) * w + iw) * c + ch)];
              const bool cur_nan = at[o] >= 0 && std::isnan(y[o]);
              if (at[o] < 0 || (!cur_nan && (std::isnan(v) || v > y[o]))) {
                y[o] = v;
                at[o] = ih * w + iw;
              }
            }
        }
}

// Runs max_pool2d forward and backward with gradient gyv (small integers, so every sum of
// them is exact) and checks values and routing against the naive loop.
void check_maxpool(const Vec& xv, int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t st, int64_t pad,
                   DType t) {
  INFO("max_pool2d " << name(t) << " [" << n << "," << h << "," << w << "," << c << "] kernel " << k << " stride "
                     << st << " pad " << pad);
  Vec xr;
  Tensor x = make(xv, {n, h, w, c}, t, &xr);
  x.set_requires_grad(true);
  Vec yref;
  std::vector<int64_t> at;
  naive_maxpool(xr, n, h, w, c, k, st, pad, yref, at);
  const int64_t oh = (h + 2 * pad - k) / st + 1, ow = (w + 2 * pad - k) / st + 1;
  Vec gyv(yref.size());
  for (size_t i = 0; i < gyv.size(); ++i) gyv[i] = double(1 + (i * 7) % 13);
  Tensor gy = make(gyv, {n, oh, ow, c}, t);
  Tape tape;
  Tensor y;
  {
    TapeScope scope(tape);
    y = engine::max_pool2d(x, k, st, pad);
  }
  REQUIRE(y.shape() == Shape{n, oh, ow, c});
  tape.backward(y, gy);
  expect_equal("y", y.to_vector(), yref);
  Vec gref(xr.size(), 0);
  double total = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t p = 0; p < oh * ow; ++p)
      for (int64_t ch = 0; ch < c; ++ch) {
        const size_t o = static_cast<size_t>((b * oh * ow + p) * c + ch);
        gref[static_cast<size_t>((b * h * w + at[o]) * c + ch)] += gyv[o];
        total += gyv[o];
      }
  const Vec gx = x.grad().to_vector();
  expect_equal("grad x", gx, gref);
  double got_total = 0;
  for (double g : gx) got_total += g;
  CHECK(got_total == total);  // the gradient total is preserved
}

TEST_CASE("max_pool2d values and argmax routing match a naive loop", "[ref]") {
  std::mt19937 rng(7);
  struct Case {
    int64_t k, st, pad;
  };
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    for (Case pc : {Case{2, 2, 0}, Case{3, 2, 1}, Case{3, 1, 1}}) {
      // Distinct random values; then all negative (a padded zero must never win).
      check_maxpool(random_vec(rng, 2 * 5 * 7 * 3, -1, 1), 2, 5, 7, 3, pc.k, pc.st, pc.pad, t);
      check_maxpool(random_vec(rng, 1 * 6 * 5 * 2, -3, -1), 1, 6, 5, 2, pc.k, pc.st, pc.pad, t);
    }
    // airbench94's last pool (3x3 -> 1x1), and the largest kernel a one-byte window index
    // holds (16 x 16: places 0..255), in the gather path (stride = kernel) and the general one.
    check_maxpool(random_vec(rng, 2 * 3 * 3 * 4, -1, 1), 2, 3, 3, 4, 3, 3, 0, t);
    for (Case pc : {Case{16, 16, 0}, Case{16, 5, 8}})
      check_maxpool(random_vec(rng, 2 * 17 * 18 * 2, -1, 1), 2, 17, 18, 2, pc.k, pc.st, pc.pad, t);
  }
}

TEST_CASE("max_pool2d refuses a kernel whose window a byte cannot index", "[ref]") {
  const Tensor x = Tensor::zeros({1, 17, 17, 1}, DType::F32);
  CHECK_NOTHROW(engine::max_pool2d(x, 16, 1, 0));
  CHECK_THROWS_WITH(engine::max_pool2d(x, 17, 1, 0), Catch::Contains("kernel 17 over 16"));
}

TEST_CASE("max_pool2d ties go to the first element in scan order, NaN propagates", "[ref]") {
  SECTION("a constant image: each window sends its gradient to its first element") {
    for (int64_t pad : {0, 1}) {
      const int64_t k = pad ? 3 : 2, st = pad ? 1 : 2;
      check_maxpool(Vec(4 * 6 * 2, 0.5), 1, 4, 6, 2, k, st, pad, DType::F32);
      check_maxpool(Vec(4 * 6 * 2, 0.5), 1, 4, 6, 2, k, st, pad, DType::F16);
    }
    // Explicitly, not only through the naive loop: 2x2 windows of one 2x2 block of 3s.
    Tensor x = Tensor::from_vector({3, 3, 1, 3, 3, 1}, {1, 2, 3, 1}, DType::F32);
    x.set_requires_grad(true);
    Tape tape;
    Tensor y;
    {
      TapeScope scope(tape);
      y = engine::max_pool2d(x, 2, 1, 0);  // windows at columns 0 and 1
    }
    tape.backward(y, Tensor::from_vector({10, 100}, {1, 1, 2, 1}, DType::F32));
    expect_equal("y", y.to_vector(), {3, 3});
    // Window 0 = {3,3;3,3}: first is (0,0). Window 1 = {3,1;3,1}: first is (0,1).
    expect_equal("grad x", x.grad().to_vector(), {10, 100, 0, 0, 0, 0});
  }
  SECTION("NaN") {
    Vec v(1 * 4 * 4 * 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(i % 5) - 2;
    v[(1 * 4 + 2) * 2 + 0] = kNaN;  // (1,2) channel 0
    v[(3 * 4 + 0) * 2 + 1] = kNaN;  // (3,0) channel 1
    for (DType t : {DType::F32, DType::F16, DType::BF16}) check_maxpool(v, 1, 4, 4, 2, 2, 2, 0, t);
    check_maxpool(v, 1, 4, 4, 2, 3, 1, 1, DType::F32);
    Tensor y = engine::max_pool2d(Tensor::from_vector(v, {1, 4, 4, 2}, DType::F32), 2, 2, 0);
    const Vec yv = y.to_vector();
    CHECK(std::isnan(yv[(0 * 2 + 1) * 2 + 0]));  // window (0,1) holds (1,2) ch 0
    CHECK(std::isnan(yv[(1 * 2 + 0) * 2 + 1]));  // window (1,0) holds (3,0) ch 1
    CHECK_FALSE(std::isnan(yv[0]));
  }
}

// ---- global_avg_pool -------------------------------------------------------------------------

TEST_CASE("global_avg_pool matches a naive mean, and its gradient spreads evenly", "[ref]") {
  std::mt19937 rng(11);
  const int64_t n = 2, h = 3, w = 5, c = 4, hw = h * w;
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    INFO("dtype " << name(t));
    Vec xv, gyv;
    Tensor x = make(random_vec(rng, static_cast<size_t>(n * hw * c), -2, 3), {n, h, w, c}, t, &xv);
    Tensor gy = make(random_vec(rng, static_cast<size_t>(n * c), -1, 1), {n, c}, t, &gyv);
    x.set_requires_grad(true);
    Tape tape;
    Tensor y;
    {
      TapeScope scope(tape);
      y = engine::global_avg_pool(x);
    }
    REQUIRE(y.shape() == Shape{n, c});
    tape.backward(y, gy);
    // Sum of hw terms then one division, in the accumulator: (hw + 3) u sum|x| / hw.
    const double u = acc_unit(t);
    Vec ref(static_cast<size_t>(n * c)), err(ref.size());
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch) {
        double s = 0, a = 0;
        for (int64_t p = 0; p < hw; ++p) {
          s += xv[static_cast<size_t>((b * hw + p) * c + ch)];
          a += std::fabs(xv[static_cast<size_t>((b * hw + p) * c + ch)]);
        }
        ref[static_cast<size_t>(b * c + ch)] = s / double(hw);
        err[static_cast<size_t>(b * c + ch)] = (hw + 3) * u * a / double(hw);
      }
    expect_close("y", y.to_vector(), ref, err, t);
    Vec gref(xv.size()), gerr(xv.size());
    for (int64_t b = 0; b < n; ++b)
      for (int64_t p = 0; p < hw; ++p)
        for (int64_t ch = 0; ch < c; ++ch) {
          gref[static_cast<size_t>((b * hw + p) * c + ch)] = gyv[static_cast<size_t>(b * c + ch)] / double(hw);
          gerr[static_cast<size_t>((b * hw + p) * c + ch)] = 2 * u * std::fabs(gyv[static_cast<size_t>(b * c + ch)]) / double(hw);
        }
    expect_close("grad x", x.grad().to_vector(), gref, gerr, t);
  }
}

// ---- batch_norm ------------------------------------------------------------------------------

// Per-channel training statistics in double: mean, biased and unbiased variance.
void naive_stats(const Vec& x, int64_t rows, int64_t c, Vec& mean, Vec& var, Vec& var_unbiased) {
  mean.assign(static_cast<size_t>(c), 0);
  var.assign(static_cast<size_t>(c), 0);
  var_unbiased.assign(static_cast<size_t>(c), 0);
  for (int64_t ch = 0; ch < c; ++ch) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += x[static_cast<size_t>(r * c + ch)];
    const double m = s / double(rows);
    double sq = 0;
    for (int64_t r = 0; r < rows; ++r) sq += (x[static_cast<size_t>(r * c + ch)] - m) * (x[static_cast<size_t>(r * c + ch)] - m);
    mean[static_cast<size_t>(ch)] = m;
    var[static_cast<size_t>(ch)] = sq / double(rows);
    var_unbiased[static_cast<size_t>(ch)] = sq / double(rows - 1);
  }
}

// y = (x - mean) / sqrt(var + eps) * gamma + beta, with its error bound: the statistics carry
// about `rows` roundings, the affine a few more, each relative to the magnitudes involved:
// err = (rows + 10) u (|gamma| (|x| + |mean|) invstd + |beta|).
void naive_bn_apply(const Vec& x, int64_t rows, int64_t c, const Vec& mean, const Vec& var, const Vec& gamma,
                    const Vec& beta, double eps, double u, Vec& y, Vec& err) {
  y.assign(x.size(), 0);
  err.assign(x.size(), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t ch = 0; ch < c; ++ch) {
      const size_t i = static_cast<size_t>(r * c + ch);
      const double invstd = 1.0 / std::sqrt(var[ch] + eps);
      y[i] = (x[i] - mean[ch]) * invstd * gamma[ch] + beta[ch];
      err[i] = (rows + 10) * u *
               (std::fabs(gamma[ch]) * (std::fabs(x[i]) + std::fabs(mean[ch])) * invstd + std::fabs(beta[ch]));
    }
}

TEST_CASE("batch_norm training, running statistics and eval match PyTorch's semantics", "[ref]") {
  std::mt19937 rng(5);
  const int64_t n = 2, h = 3, w = 4, c = 3, rows = n * h * w;
  const double momentum = 0.1, eps = 1e-5;
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    INFO("dtype " << name(t));
    const DType pd = t == DType::F64 ? DType::F64 : DType::F32;  // parameters and statistics
    const double u = acc_unit(t);
    Vec xv = random_vec(rng, static_cast<size_t>(rows * c), -1, 1);
    for (int64_t r = 0; r < rows; ++r) xv[static_cast<size_t>(r * c + 1)] = 3 + 2 * xv[static_cast<size_t>(r * c + 1)];  // shifted channel
    Vec xr, gv, bv, rm0, rv0;
    Tensor x = make(xv, {n, h, w, c}, t, &xr);
    Tensor gamma = make(random_vec(rng, static_cast<size_t>(c), 0.5, 1.5), {c}, pd, &gv);
    Tensor beta = make(random_vec(rng, static_cast<size_t>(c), -0.5, 0.5), {c}, pd, &bv);
    Tensor rmean = make(random_vec(rng, static_cast<size_t>(c), -0.5, 0.5), {c}, pd, &rm0);
    Tensor rvar = make(random_vec(rng, static_cast<size_t>(c), 0.5, 2.0), {c}, pd, &rv0);

    Tensor y = engine::batch_norm(x, gamma, beta, rmean, rvar, true, momentum, eps);
    Vec mean, var, varu, yref, yerr;
    naive_stats(xr, rows, c, mean, var, varu);
    naive_bn_apply(xr, rows, c, mean, var, gv, bv, eps, u, yref, yerr);
    expect_close("train y", y.to_vector(), yref, yerr, t);

    // running = (1 - momentum) running + momentum batch, with the unbiased batch variance.
    Vec rm1(static_cast<size_t>(c)), rv1(static_cast<size_t>(c)), rm_err(static_cast<size_t>(c)), rv_err(static_cast<size_t>(c));
    for (int64_t ch = 0; ch < c; ++ch) {
      rm1[ch] = (1 - momentum) * rm0[ch] + momentum * mean[ch];
      rv1[ch] = (1 - momentum) * rv0[ch] + momentum * varu[ch];
      rm_err[ch] = (rows + 8) * u * (std::fabs(rm0[ch]) + std::fabs(mean[ch]) + 1);
      rv_err[ch] = (2 * rows + 8) * u * (rv0[ch] + varu[ch]);
    }
    const DType stat_t = pd;
    expect_close("running mean", rmean.to_vector(), rm1, rm_err, stat_t);
    expect_close("running var", rvar.to_vector(), rv1, rv_err, stat_t);

    // Eval uses (and keeps) the running statistics.
    const Vec rm_now = rmean.to_vector(), rv_now = rvar.to_vector();
    Tensor ye = engine::batch_norm(x, gamma, beta, rmean, rvar, false, momentum, eps);
    Vec eref, eerr;
    naive_bn_apply(xr, rows, c, rm_now, rv_now, gv, bv, eps, u, eref, eerr);
    for (double& e : eerr) e *= 16.0 / double(rows + 10);  // no statistics computed: a few roundings
    expect_close("eval y", ye.to_vector(), eref, eerr, t);
    expect_equal("running mean after eval", rmean.to_vector(), rm_now);
    expect_equal("running var after eval", rvar.to_vector(), rv_now);
  }
}

TEST_CASE("batch_norm on FP16 data with a variance above 65504 stays finite and correct", "[ref]") {
  std::mt19937 rng(77);
  const int64_t rows = 32, c = 2;
  const double eps = 1e-5, u = acc_unit(DType::F16);
  Vec xv(static_cast<size_t>(rows * c));
  std::uniform_real_distribution<double> d(-50, 50);
  for (int64_t r = 0; r < rows; ++r) {
    xv[static_cast<size_t>(r * c + 0)] = (r % 2 ? 1000.0 : -1000.0) + d(rng);  // variance ~ 1e6, squares ~ 1e6
    xv[static_cast<size_t>(r * c + 1)] = d(rng) / 50;
  }
  Vec xr;
  Tensor x = make(xv, {rows, c}, DType::F16, &xr);
  Tensor gamma = Tensor::from_vector({1.5, 0.5}, {c}, DType::F32);
  Tensor beta = Tensor::from_vector({0.25, -0.25}, {c}, DType::F32);
  Tensor rmean = Tensor::zeros({c}, DType::F32);
  Tensor rvar = Tensor::full({c}, 1.0, DType::F32);
  Tensor y = engine::batch_norm(x, gamma, beta, rmean, rvar, true);
  Vec mean, var, varu, yref, yerr;
  naive_stats(xr, rows, c, mean, var, varu);
  REQUIRE(var[0] > 65504.0);  // the point of the test
  naive_bn_apply(xr, rows, c, mean, var, {1.5, 0.5}, {0.25, -0.25}, eps, u, yref, yerr);
  const Vec yv = y.to_vector();
  for (double v : yv) REQUIRE(std::isfinite(v));
  expect_close("y", yv, yref, yerr, DType::F16);
  const Vec rv = rvar.to_vector();
  REQUIRE(std::isfinite(rv[0]));
  const double rv_ref = 0.9 + 0.1 * varu[0];
  CHECK(rv_ref > 65504.0);
  expect_close("running var", rv, {rv_ref, 0.9 + 0.1 * varu[1]},
               {(2 * rows + 8) * u * (1 + varu[0]), (2 * rows + 8) * u * (1 + varu[1])}, DType::F32);
  expect_close("running mean", rmean.to_vector(), {0.1 * mean[0], 0.1 * mean[1]},
               {(rows + 8) * u * 1000, (rows + 8) * u}, DType::F32);
}

// ---- cross_entropy ---------------------------------------------------------------------------

// Mean over rows of (1 - ls) (lse - z_y) + ls mean_k (lse - z_k), and its gradient
// (softmax - target) / N with target = (1 - ls) onehot + ls / K, all in double.
void naive_ce(const Vec& z, const std::vector<int32_t>& y, int64_t n, int64_t k, double ls, double& loss, Vec& grad) {
  loss = 0;
  grad.assign(z.size(), 0);
  for (int64_t r = 0; r < n; ++r) {
    double mx = -kInf;
    for (int64_t j = 0; j < k; ++j) mx = std::max(mx, z[static_cast<size_t>(r * k + j)]);
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += std::exp(z[static_cast<size_t>(r * k + j)] - mx);
    const double lse = mx + std::log(s);
    double mean_nlp = 0;
    for (int64_t j = 0; j < k; ++j) mean_nlp += (lse - z[static_cast<size_t>(r * k + j)]) / double(k);
    loss += ((1 - ls) * (lse - z[static_cast<size_t>(r * k + y[r])]) + ls * mean_nlp) / double(n);
    for (int64_t j = 0; j < k; ++j) {
      const double p = std::exp(z[static_cast<size_t>(r * k + j)] - lse);
      const double target = ls / double(k) + (j == y[r] ? 1 - ls : 0);
      grad[static_cast<size_t>(r * k + j)] = (p - target) / double(n);
    }
  }
}

TEST_CASE("cross_entropy matches a naive log-softmax + NLL, with and without label smoothing", "[ref]") {
  std::mt19937 rng(3);
  const int64_t n = 6, k = 10;
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) labels[static_cast<size_t>(r)] = int32_t((r * 3 + 1) % k);
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16}) {
    for (double ls : {0.0, 0.1}) {
      INFO("dtype " << name(t) << ", label smoothing " << ls);
      Vec zr;
      Tensor z = make(random_vec(rng, static_cast<size_t>(n * k), -4, 4), {n, k}, t, &zr);
      z.set_requires_grad(true);
      Tape tape;
      Tensor loss;
      {
        TapeScope scope(tape);
        loss = engine::cross_entropy(z, Tensor::from_ints(labels, {n}), ls);
      }
      REQUIRE(loss.numel() == 1);
      REQUIRE(loss.dtype() == (t == DType::F64 ? DType::F64 : DType::F32));
      tape.backward(loss);
      double lref;
      Vec gref;
      naive_ce(zr, labels, n, k, ls, lref, gref);
      // log-sum-exp and the sums over K classes and N rows in the accumulator: (N + 4K) u
      // times the largest magnitude involved (|logits| <= 4, |lse - z| <= 4 + 4 + log K < 16).
      const double u = acc_unit(t);
      const DType acc_dt = t == DType::F64 ? DType::F64 : DType::F32;
      expect_close("loss", {loss.item()}, {lref}, {(n + 4 * k) * u * 16}, acc_dt);
      // Gradient: softmax (exp of a value good to ~K u times its size 8) minus target, / N;
      // then one rounding to the logits' dtype.
      expect_close("grad", z.grad().to_vector(), gref, Vec(gref.size(), 8 * k * u * 8 / double(n)), t);
    }
  }
}

TEST_CASE("cross_entropy of FP16 logits near the FP16 limit is finite, bad labels throw", "[ref]") {
  const Vec zv = {60000, -60000, 0, -60000, 60000, 60000};
  const std::vector<int32_t> labels = {1, 0};
  Tensor z = Tensor::from_vector(zv, {2, 3}, DType::F16);
  REQUIRE(z.to_vector() == zv);  // all exactly representable
  for (double ls : {0.0, 0.1}) {
    INFO("label smoothing " << ls);
    z.set_requires_grad(true);
    Tape tape;
    Tensor loss;
    {
      TapeScope scope(tape);
      loss = engine::cross_entropy(z, Tensor::from_ints(labels, {2}), ls);
    }
    tape.backward(loss);
    double lref;
    Vec gref;
    naive_ce(zv, labels, 2, 3, ls, lref, gref);
    REQUIRE(std::isfinite(loss.item()));
    // lse ~ 6e4 and the loss ~ 1.2e5 in FP32: a few roundings of values of that size.
    expect_close("loss", {loss.item()}, {lref}, {16 * acc_unit(DType::F32) * 2.4e5}, DType::F32);
    const Vec g = z.grad().to_vector();
    for (double v : g) REQUIRE(std::isfinite(v));
    expect_close("grad", g, gref, Vec(g.size(), 16 * acc_unit(DType::F32)), DType::F16);
    z.set_grad(Tensor());
  }
  const Tensor logits = Tensor::from_vector(Vec(2 * 5, 0.5), {2, 5}, DType::F32);
  CHECK_THROWS_AS(engine::cross_entropy(logits, Tensor::from_ints({0, 5}, {2})), engine::Error);
  CHECK_THROWS_AS(engine::cross_entropy(logits, Tensor::from_ints({-1, 2}, {2})), engine::Error);
  CHECK_NOTHROW(engine::cross_entropy(logits, Tensor::from_ints({0, 4}, {2})));
}

// ---- cast ------------------------------------------------------------------------------------

TEST_CASE("cast rounds to nearest even, once, and its gradient is cast back", "[ref]") {
  const double e11 = std::ldexp(1.0, -11), e8 = std::ldexp(1.0, -8);
  SECTION("F32 -> F16 ties and overflow") {
    const Vec in = {1 + e11,      1 + 3 * e11,   -(1 + e11),           -(1 + 3 * e11), 1 + e11 + std::ldexp(1.0, -20),
                    65519.99609375, 65520.0,       std::ldexp(1.0, -25), 3 * std::ldexp(1.0, -25), std::ldexp(1.0, -26)};
    const Vec want = {1, 1 + std::ldexp(1.0, -9), -1, -(1 + std::ldexp(1.0, -9)), 1 + std::ldexp(1.0, -10),
                      65504, kInf, 0, std::ldexp(1.0, -23), 0};
    Tensor x = Tensor::from_vector(in, {int64_t(in.size())}, DType::F32);
    REQUIRE(x.to_vector() == in);  // the probes are exact floats
    Tensor y = engine::cast(x, DType::F16);
    REQUIRE(y.dtype() == DType::F16);
    expect_equal("f16", y.to_vector(), want);
  }
  SECTION("F32 -> BF16 ties") {
    const Vec in = {1 + e8, 1 + 3 * e8, -(1 + 3 * e8), 1 + e8 + std::ldexp(1.0, -20),
                    double(std::numeric_limits<float>::max())};
    const Vec want = {1, 1 + std::ldexp(1.0, -6), -(1 + std::ldexp(1.0, -6)), 1 + std::ldexp(1.0, -7),
                      kInf};  // FLT_MAX is past BF16's max + half an ulp
    Tensor y = engine::cast(Tensor::from_vector(in, {int64_t(in.size())}, DType::F32), DType::BF16);
    expect_equal("bf16", y.to_vector(), want);
  }
  SECTION("F64 -> F16 rounds once (no double rounding through FP32)") {
    // Just above the tie 1 + 2^-11: FP32 would first round it onto the tie, then to 1.
    Tensor y = engine::cast(Tensor::from_vector({1 + e11 + std::ldexp(1.0, -40)}, {1}, DType::F64), DType::F16);
    expect_equal("f16", y.to_vector(), {1 + std::ldexp(1.0, -10)});
  }
  SECTION("random values against the reference rounding") {
    std::mt19937 rng(8);
    Vec v = random_vec(rng, 4000, -70000, 70000);
    Vec w = random_vec(rng, 4000, -1e-3, 1e-3);  // includes FP16 subnormals
    v.insert(v.end(), w.begin(), w.end());
    Vec vr;
    Tensor x = make(v, {int64_t(v.size())}, DType::F32, &vr);
    for (DType t : {DType::F16, DType::BF16}) {
      INFO("to " << name(t));
      Vec want(vr.size());
      for (size_t i = 0; i < vr.size(); ++i) want[i] = round_to(vr[i], t);
      expect_equal("cast", engine::cast(x, t).to_vector(), want);
    }
  }
  SECTION("backward casts the gradient back to the input dtype") {
    Tensor x = Tensor::from_vector({1.0, 2.0, -3.0}, {3}, DType::F32);
    x.set_requires_grad(true);
    Tape tape;
    Tensor y;
    {
      TapeScope scope(tape);
      y = engine::cast(x, DType::F16);
    }
    tape.backward(y, Tensor::from_vector({0.5, -0.25, 1e-3}, {3}, DType::F16));
    REQUIRE(x.grad().dtype() == DType::F32);
    expect_equal("grad", x.grad().to_vector(), {0.5, -0.25, round_to(1e-3, DType::F16)});

    // F16 -> F32: the FP32 gradient is rounded (to nearest even) into FP16.
    Tensor h = Tensor::from_vector({1.0, 2.0}, {2}, DType::F16);
    h.set_requires_grad(true);
    Tape tape2;
    Tensor z;
    {
      TapeScope scope(tape2);
      z = engine::cast(h, DType::F32);
    }
    REQUIRE(z.dtype() == DType::F32);
    tape2.backward(z, Tensor::from_vector({1 + e11, 1 + 3 * e11}, {2}, DType::F32));
    REQUIRE(h.grad().dtype() == DType::F16);
    expect_equal("grad", h.grad().to_vector(), {1, 1 + std::ldexp(1.0, -9)});
  }
}

// ---- dropout ---------------------------------------------------------------------------------

TEST_CASE("dropout: a deterministic mask per (seed, stream), kept values scaled, same mask backward", "[ref]") {
  const int64_t n = 100000;
  const double p = 0.3;
  Tensor x = Tensor::full({n}, 1.0, DType::F32);
  x.set_requires_grad(true);
  Tape tape;
  Tensor y;
  {
    TapeScope scope(tape);
    y = engine::dropout(x, p, 42, 7);
  }
  const Vec a = y.to_vector();
  const Vec b = engine::dropout(x, p, 42, 7).to_vector();
  const Vec c = engine::dropout(x, p, 42, 8).to_vector();
  const Vec d = engine::dropout(x, p, 43, 7).to_vector();
  CHECK(a == b);
  int64_t kept = 0, differ_stream = 0, differ_seed = 0, bad_scale = 0;
  // Kept values are 1 / (1 - p) computed in FP32: p rounded to float, one division and (in
  // backward) one product, each within half an FP32 ulp: 4 u relative covers them.
  const double scale = 1.0 / (1.0 - p), tol = 4 * scale * acc_unit(DType::F32);
  for (int64_t i = 0; i < n; ++i) {
    if (a[i] != 0) {
      ++kept;
      if (std::fabs(a[i] - scale) > tol) ++bad_scale;
    }
    differ_stream += (a[i] != 0) != (c[i] != 0);
    differ_seed += (a[i] != 0) != (d[i] != 0);
  }
  CHECK(bad_scale == 0);
  // Kept fraction ~ Binomial(n, 1-p)/n: standard deviation sqrt(p(1-p)/n) = 0.00145; allow 5 sigma.
  const double frac = double(kept) / double(n);
  CHECK(std::fabs(frac - (1 - p)) < 5 * std::sqrt(p * (1 - p) / double(n)));
  // Independent masks disagree on a fraction 2p(1-p) = 0.42 of the elements.
  CHECK(double(differ_stream) / double(n) > 0.38);
  CHECK(double(differ_seed) / double(n) > 0.38);

  // Backward: the same mask and scale applied to the gradient.
  std::mt19937 rng(1);
  Vec gyv;
  Tensor gy = make(random_vec(rng, static_cast<size_t>(n), -1, 1), {n}, DType::F32, &gyv);
  tape.backward(y, gy);
  const Vec gx = x.grad().to_vector();
  Failures f;
  for (int64_t i = 0; i < n; ++i) {
    const double want = a[i] != 0 ? gyv[i] * scale : 0.0;
    if (!(std::fabs(gx[i] - want) <= 4 * acc_unit(DType::F32) * std::fabs(want)) || ((gx[i] == 0) != (want == 0)))
      f.add("grad[" + std::to_string(i) + "] = " + std::to_string(gx[i]) + ", expected " + std::to_string(want));
  }
  INFO(f.first);
  CHECK(f.count == 0);

  // FP16 data: the same mask (it depends only on seed, stream and index).
  const Vec h = engine::dropout(Tensor::full({n}, 1.0, DType::F16), p, 42, 7).to_vector();
  int64_t mask_diff = 0;
  for (int64_t i = 0; i < n; ++i) mask_diff += (h[i] != 0) != (a[i] != 0);
  CHECK(mask_diff == 0);
}

// ---- element-wise ops in FP16/BF16 storage ---------------------------------------------------

TEST_CASE("relu, gelu, add and scale in FP16/BF16 round the float result once", "[ref]") {
  std::mt19937 rng(21);
  const int64_t n = 5000;
  for (DType t : {DType::F16, DType::BF16}) {
    INFO("dtype " << name(t));
    Vec av, bv;
    Tensor a = make(random_vec(rng, static_cast<size_t>(n), -3, 3), {n}, t, &av);
    Tensor b = make(random_vec(rng, static_cast<size_t>(n), -3, 3), {n}, t, &bv);
    Vec relu_ref(static_cast<size_t>(n)), add_ref(static_cast<size_t>(n)), scale_ref(static_cast<size_t>(n)), scale3_ref(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      relu_ref[i] = av[i] > 0 ? av[i] : 0;
      // The float computation of the rounded inputs, rounded once to the storage type.
      add_ref[i] = round_to(double(float(av[i]) + float(bv[i])), t);
      scale_ref[i] = round_to(double(0.375f * float(av[i])), t);   // 0.375 is exact in float
      scale3_ref[i] = round_to(double(-3.0f * float(av[i])), t);
    }
    expect_equal("relu", engine::relu(a).to_vector(), relu_ref);
    expect_equal("add", engine::add(a, b).to_vector(), add_ref);
    expect_equal("scale 0.375", engine::scale(a, 0.375).to_vector(), scale_ref);
    expect_equal("scale -3", engine::scale(a, -3.0).to_vector(), scale3_ref);
    // GELU (exact erf form) in double; the engine evaluates it in float, good to a few float
    // ulps of the terms' size (1 + erf cancels for negative x), then rounds once to t.
    Vec gelu_ref(static_cast<size_t>(n)), gelu_err(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      gelu_ref[i] = 0.5 * av[i] * (1 + std::erf(av[i] / std::sqrt(2.0)));
      gelu_err[i] = 8 * acc_unit(t) * (std::fabs(av[i]) + std::fabs(gelu_ref[i]));
    }
    expect_close("gelu", engine::gelu(a).to_vector(), gelu_ref, gelu_err, t);
  }
  // Sums that need the final rounding: 1 + 2^-11 is a tie in FP16 and goes to even (1).
  Tensor one = Tensor::from_vector({1.0, 1.0 + std::ldexp(1.0, -10)}, {2}, DType::F16);
  Tensor tiny = Tensor::from_vector({std::ldexp(1.0, -11), std::ldexp(1.0, -11)}, {2}, DType::F16);
  expect_equal("add tie", engine::add(one, tiny).to_vector(), {1.0, 1.0 + std::ldexp(1.0, -9)});
  // Overflow in the storage type: 40000 + 40000 is inf in FP16.
  Tensor big = Tensor::from_vector({40000.0}, {1}, DType::F16);
  expect_equal("add overflow", engine::add(big, big).to_vector(), {kInf});
}

}  // namespace

TEST_CASE("max_pool2d in FP64 tells apart values that FP32 would call equal", "[ref]") {
  // 1 + 2^-40 rounds to 1 in FP32: a comparison in float would see a tie and keep the first.
  const double hi = 1.0 + std::ldexp(1.0, -40);
  check_maxpool({1.0, hi, 1.0, 1.0}, 1, 2, 2, 1, 2, 2, 0, DType::F64);
  Tensor y = engine::max_pool2d(Tensor::from_vector({1.0, hi, 1.0, 1.0}, {1, 2, 2, 1}, DType::F64), 2, 2, 0);
  CHECK(y.to_vector() == Vec{hi});
}

TEST_CASE("max_pool2d_backward overwrites its output, as the CUDA kernel does", "[ref]") {
  // The contract of both backends: gx is written whole, whatever it held (NaN here).
  const kernels::PoolShape sh{1, 4, 4, 2, 2, 2, 0};
  std::vector<float> x(32), y(8), gy(8, 1.0f), gx(32, std::nanf(""));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7) % 11);
  std::vector<uint8_t> argmax(8);
  kernels::cpu::max_pool2d_forward(sh, x.data(), y.data(), argmax.data());
  kernels::cpu::max_pool2d_backward(sh, gy.data(), argmax.data(), gx.data());
  float total = 0;
  for (float g : gx) {
    REQUIRE_FALSE(std::isnan(g));
    total += g;
  }
  CHECK(total == 8.0f);  // each output's gradient lands once
}

TEMPLATE_TEST_CASE("16-bit ReLU on the bits equals ReLU of the widened value, for all 65,536 patterns", "[ref]",
                   kernels::half, kernels::bfloat16) {
  using T = TestType;
  std::vector<T> x(65536), gy(65536), y(65536), gx(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    x[b].bits = static_cast<uint16_t>(b);
    gy[b].bits = static_cast<uint16_t>(b * 40503u);  // another pattern per element, NaNs and infs included
  }
  kernels::cpu::relu_forward(x.data(), y.data(), 65536);
  kernels::cpu::relu_backward(x.data(), gy.data(), gx.data(), 65536);
  int64_t wrong = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float xf = static_cast<float>(x[b]);
    const T want_y = kernels::convert<T>(kernels::relu_fwd<float>(xf));
    const T want_gx = xf > 0.0f ? gy[b] : kernels::convert<T>(0.0f);
    wrong += y[b].bits != want_y.bits || gx[b].bits != want_gx.bits;
  }
  REQUIRE(wrong == 0);
}

TEST_CASE("FP16 array conversions (F16C where the host has it) give the scalar conversions' bits", "[ref]") {
  // Every half pattern widened; every widened value and its neighbours halfway to the next
  // half (ties both ways) narrowed; lengths not a multiple of 8.
  std::vector<kernels::half> h(65536);
  for (uint32_t b = 0; b < 65536; ++b) h[b].bits = static_cast<uint16_t>(b);
  std::vector<float> f(65536);
  kernels::cpu::convert_array(h.data(), f.data(), 65535);
  int64_t wrong = 0;
  for (uint32_t b = 0; b < 65535; ++b) {
    const float want = kernels::half_bits_to_float(h[b].bits);
    wrong += std::memcmp(&f[b], &want, 4) != 0;
  }
  std::vector<float> src;
  for (uint32_t b = 0; b < 65536; b += 7) {
    const float v = kernels::half_bits_to_float(static_cast<uint16_t>(b));
    src.push_back(v);
    src.push_back(std::nextafter(v, INFINITY));
    src.push_back(std::nextafter(v, -INFINITY));
    src.push_back(v * (1.0f + 1.0f / 2048));  // about half an ulp above: a tie or near it
  }
  std::vector<kernels::half> out(src.size());
  kernels::cpu::convert_array(src.data(), out.data(), static_cast<int64_t>(src.size()));
  for (size_t i = 0; i < src.size(); ++i) wrong += out[i].bits != kernels::float_to_half_bits(src[i]);
  REQUIRE(wrong == 0);
}

// kernels/cpu/vector_math.h against FP64 libm: the vectorising float exp, normal CDF and GELU
// (forward and backward) over the whole float range, in ulps of the FP64 value rounded to
// float; the engine's GELU op on the CPU (all three storage types) against it; and the FP16/BF16
// tables (kernels/cpu/gelu_table.h) against it for every 16-bit input.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/ops.h"
#include "engine/tape.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/vector_math.h"

namespace kc = kernels::cpu;

namespace {

// |got - want| in units of float's spacing at want (the ulp of the correctly rounded result).
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp = std::fabs(std::nextafter(w, std::numeric_limits<float>::infinity()) - w);
  return std::fabs(double(got) - want) / std::max(ulp, double(std::numeric_limits<float>::denorm_min()));
}

double cdf64(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

// Every 97th float bit pattern of the range: about 44 million over +-[1e-30, ~90], walked
// with a stride that hits all exponents and mantissa patterns.
template <class F> void for_floats(float lo, float hi, F f) {
  for (float x = lo; x < hi;) {
    f(x);
    uint32_t b;
    std::memcpy(&b, &x, 4);
    b = x >= 0 ? b + 9973 : b - 9973;  // toward +inf either side of zero
    if (x < 0 && b < 0x80000000u) b = 0;
    std::memcpy(&x, &b, 4);
    if (x < 0 && x > -1e-30f) x = 1e-30f;
  }
}

}  // namespace

TEST_CASE("vector math: exp within 2 ulps of FP64 exp, with its limits", "[vector_math]") {
  double worst = 0;
  for_floats(-87.3f, 88.7f, [&](float x) { worst = std::max(worst, ulps(kc::exp_vec(x), std::exp(double(x)))); });
  INFO("worst " << worst << " ulps");
  // Taylor to degree 7 (2^-27 at |r| = ln2/2), Cody-Waite reduction exact, and about four
  // roundings in Horner's scheme: under 2 ulps (measured 0.8).
  CHECK(worst <= 2.0);
  CHECK(kc::exp_vec(0.0f) == 1.0f);
  CHECK(kc::exp_vec(-100.0f) == 0.0f);
  CHECK(kc::exp_vec(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isinf(kc::exp_vec(100.0f)));
  CHECK(std::isnan(kc::exp_vec(std::nanf(""))));
}

TEST_CASE("vector math: the normal CDF and GELU within a few ulps, relatively in both tails", "[vector_math]") {
  double worst_cdf = 0, worst_fwd = 0, worst_bwd = 0;
  for_floats(-13.0f, 13.0f, [&](float x) {
    const double d = double(x), c = cdf64(d), pdf = std::exp(-0.5 * d * d) / std::sqrt(2 * M_PI);
    worst_cdf = std::max(worst_cdf, ulps(kc::normal_cdf_vec(x), c));
    worst_fwd = std::max(worst_fwd, ulps(kc::gelu_fwd_vec(x), d * c));
    // The derivative Phi + x phi crosses zero near x = -0.75: judged against its terms' size.
    const double want = c + d * pdf, size = c + std::fabs(d) * pdf;
    const double err = std::fabs(double(kc::gelu_bwd_vec(x, 1.0f)) - want);
    const double ulp = std::fabs(std::nextafter(float(size), 1e30f) - float(size));
    worst_bwd = std::max(worst_bwd, err / std::max(ulp, 1e-45));
  });
  INFO("worst: cdf " << worst_cdf << ", gelu " << worst_fwd << ", gelu' " << worst_bwd << " ulps");
  // The bound: Numerical Recipes' fit, fractional error below 1.2e-7 (2 ulps); the ten Horner
  // steps of P(t), each rounding |P| <= 1.3 by half an ulp of it, enter the exponential as
  // absolute errors of its argument, so as relative errors of the result: at most
  // 10 x 1.3 x 0.5 = 6.5 ulps; exp's own 1, t's division, the reflection and the product with
  // x: under 12 ulps at worst, far tails included. (Measured: 5.6 for the CDF and both GELUs.)
  CHECK(worst_cdf <= 12.0);
  CHECK(worst_fwd <= 12.0);
  CHECK(worst_bwd <= 12.0);
  CHECK(kc::normal_cdf_vec(-8.0f) == Approx(6.22096057427e-16).epsilon(1e-6));  // not 0: the tail
  CHECK(kc::gelu_fwd_vec(0.0f) == 0.0f);
  CHECK(kc::gelu_fwd_vec(30.0f) == 30.0f);
  CHECK(kc::gelu_fwd_vec(-30.0f) == 0.0f);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(kc::normal_cdf_vec(inf) == 1.0f);
  CHECK(kc::normal_cdf_vec(-inf) == 0.0f);
  CHECK(kc::gelu_fwd_vec(inf) == inf);  // as libm's form; -inf x 0 stays NaN there too
  CHECK(std::isnan(kc::gelu_fwd_vec(std::nanf(""))));  // anomaly mode sees a NaN pass through
  CHECK(std::isnan(kc::gelu_bwd_vec(std::nanf(""), 1.0f)));
  CHECK(std::isnan(kc::gelu_bwd_vec(1.0f, std::nanf(""))));
}

TEST_CASE("the GELU op on the CPU gives the vector form's bits in every storage type", "[vector_math]") {
  std::vector<double> xs;
  for (int i = -400; i <= 400; ++i) xs.push_back(i * 0.025);
  const int64_t n = static_cast<int64_t>(xs.size());
  for (engine::DType dt : {engine::DType::F32, engine::DType::F16, engine::DType::BF16}) {
    INFO(engine::dtype_name(dt));
    engine::Tensor x = engine::Tensor::from_vector(xs, {n}, dt);
    x.set_requires_grad(true);
    engine::Tape tape;
    engine::Tensor y;
    {
      engine::TapeScope scope(tape);
      y = engine::gelu(x);
      tape.backward(engine::sum(engine::cast(y, engine::DType::F32)));
    }
    const std::vector<double> xv = x.to_vector(), yv = y.to_vector(), gv = x.grad().to_vector();
    for (int64_t i = 0; i < n; ++i) {
      const float xf = static_cast<float>(xv[i]);
      // One rounding into the storage type of the float results.
      const double y_want = engine::Tensor::from_vector({kc::gelu_fwd_vec(xf)}, {1}, dt).to_vector()[0];
      const double g_want = engine::Tensor::from_vector({kc::gelu_bwd_vec(xf, 1.0f)}, {1}, dt).to_vector()[0];
      REQUIRE(yv[i] == y_want);
      REQUIRE(gv[i] == g_want);
    }
  }
}

// The FP16/BF16 GELU reads tables (kernels/cpu/gelu_table.h): for every one of the 65,536 inputs
// the kernels must give the bits the polynomial path gives, forward and, for gradients of every
// size, backward; and the forward must be GELU rounded to the type, within the float path's few
// ulps (a result next to the correctly rounded one only where the exact value is that close to
// a midpoint of the type).
template <class T> void check_gelu16_table_all_inputs() {
  std::vector<T> x(65536), y(65536), gx(65536), gy(65536);
  for (uint32_t b = 0; b < 65536; ++b) x[b] = T::from_bits(static_cast<uint16_t>(b));
  kc::unary_forward<kernels::GeluOp, T>(x.data(), y.data(), 65536);
  int64_t off_by_more = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float xf = kernels::load_simd(x[b]);
    REQUIRE(y[b].bits == kernels::store_simd<T>(kc::gelu_fwd_vec(xf)).bits);
    if (!std::isfinite(xf)) continue;
    const double want = double(xf) * cdf64(double(xf)), got = kernels::load_simd(y[b]);
    // Half a step of T at the result, plus the float path's 4 ulps, plus 2^-126: the float
    // exp gives 0 below the normal floats (exp_parts), so GELU(x < -13.2), a BF16 subnormal, is -0.
    const uint16_t mag = static_cast<uint16_t>(y[b].bits & 0x7FFF);
    const double step = std::fabs(double(kernels::load_simd(T::from_bits(static_cast<uint16_t>(mag + 1)))) -
                                  double(kernels::load_simd(T::from_bits(mag))));
    REQUIRE(std::isfinite(got));  // GELU of a finite 16-bit value is finite
    if (std::fabs(got - want) > 0.5 * step + 4 * std::fabs(want) * 0x1p-24 + 0x1p-126)
      ++off_by_more;
  }
  CHECK(off_by_more == 0);
  for (float g : {1.0f, -3.5f, 1e-3f, 6.0e4f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    INFO("gy " << g);
    std::fill(gy.begin(), gy.end(), kernels::store_simd<T>(g));
    kc::unary_backward<kernels::GeluOp, T>(x.data(), gy.data(), gx.data(), 65536);
    for (uint32_t b = 0; b < 65536; ++b) {
      const T want = kernels::store_simd<T>(kc::gelu_bwd_vec(kernels::load_simd(x[b]), kernels::load_simd(gy[b])));
      // A NaN's sign and payload are not the result's: of two NaN operands either may be the
      // one the product keeps (the compiler may order the vector multiply either way).
      const bool both_nan = std::isnan(kernels::load_simd(gx[b])) && std::isnan(kernels::load_simd(want));
      REQUIRE((gx[b].bits == want.bits || both_nan));
    }
  }
}

TEST_CASE("GELU on FP16 and BF16 by table: the polynomial's bits for all 65,536 inputs", "[vector_math]") {
  SECTION("bf16") { check_gelu16_table_all_inputs<kernels::bfloat16>(); }
  SECTION("fp16") { check_gelu16_table_all_inputs<kernels::half>(); }
}

// Float exp and the normal CDF written with adds, multiplies, one division and bit moves
// only, so that a loop over them vectorises (libm's expf and erff are calls, one element at a
// time): what the CPU's GELU runs on FP32 data, and what its FP16/BF16 tables are built from
// (gelu_table.h; GELU was 43% of airbench94's BF16 step with libm's erf). Both within a few
// float ulps; tests/test_vector_math.cpp bounds them against FP64 libm over the whole range.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace kernels::cpu {

// e^(hi + lo) in float, hi + lo never rounded into one float first: (hi + lo) = k ln2 + r with
// k = round((hi + lo) / ln2), |r| <= ln2 / 2, e^r by its Taylor series to degree 7 (remainder
// below 2^-27 of e^r), times 2^k built in the exponent bits. An argument held as a sum keeps
// its accuracy: e^(-x^2 / 2) from x^2 in one float would carry x^2's rounding (2e-6 at
// x = 8) as a relative error of the result, 30 ulps. Below -87.3 (where e^x leaves the normal
// floats) 0, above 88.7 +inf; NaN stays NaN.
inline float exp_parts(float hi, float lo) {
  const float x = hi + lo;  // for k and the limits only
  const float lim_lo = -87.33654f, lim_hi = 88.72284f;
  const float xc = x > lim_lo ? (x < lim_hi ? x : lim_hi) : lim_lo;  // a NaN takes lim_lo: k stays an integer
  // Round to nearest by the 1.5 x 2^23 trick: the sum's low mantissa bits hold k.
  const float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // ln 2 = C1 - C2 with C1 of 9 bits (Cody and Waite): k C1 is exact, and so is hi - k C1
  // when hi is near k ln2 (Sterbenz); lo, small beside hi, is added last.
  const float hc = x > lim_lo ? (x < lim_hi ? hi : 0.0f) : 0.0f, lc = x > lim_lo ? (x < lim_hi ? lo : 0.0f) : 0.0f;
  const float r = ((hc - k * 0.693359375f) + k * 2.12194440e-4f) + lc + (xc - (hc + lc));
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k for k in [-126, 128]: k = 128 (x near 88.7, e^x still finite) as 2 x 2^127.
  const float top = k > 127.0f ? 2.0f : 1.0f;
  const int32_t bits = (static_cast<int32_t>(k > 127.0f ? 127.0f : k) + 127) << 23;
  float two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
  const float e = p * top * two_k;
  return x < lim_hi ? (x > lim_lo ? e : 0.0f) : (x == x ? std::numeric_limits<float>::infinity() : x);
}
inline float exp_vec(float x) { return exp_parts(x, 0.0f); }

// -x^2 / 2 as hi + lo exactly (to float's rounding of lo): x = xh + xl with xh of 12 bits, so
// xh^2 / 2 is exact in float and the rest, xh xl + xl^2 / 2, small.
inline void minus_half_square(float x, float* hi, float* lo) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  b &= 0xFFFFF000u;
  float xh;
  std::memcpy(&xh, &b, sizeof xh);
  const bool finite = x - x == 0.0f;  // +-inf (and NaN) have no low part: -inf in hi alone
  const float xl = finite ? x - xh : 0.0f;
  *hi = -0.5f * (xh * xh);
  *lo = finite ? -(xh * xl + 0.5f * (xl * xl)) : 0.0f;
}

// The standard normal CDF Phi(x) = erfc(-x / sqrt 2) / 2, from the Chebyshev fit to erfc of
// Numerical Recipes (Press et al., 2nd ed., section 6.2: erfc(z) = t exp(-z^2 + P(t)) with
// t = 1 / (1 + z/2), fractional error below 1.2e-7 for every z >= 0). Computed for |x| and
// reflected, so both tails keep that relative accuracy: Phi(-8) = 6.2e-16, not 0; z^2 = x^2/2
// enters the exponential as an exact sum (exp_parts).
inline float normal_cdf_vec(float x) {
  const float ax = x < 0 ? -x : x;
  const float z = ax * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  float hi, lo;
  minus_half_square(ax, &hi, &lo);
  const float half_erfc = 0.5f * t * exp_parts(hi, lo + p);
  return x < 0 ? half_erfc : 1.0f - half_erfc;
}

// GELU's exact form x Phi(x), and its derivative Phi(x) + x phi(x) times gy.
inline float gelu_fwd_vec(float x) { return x * normal_cdf_vec(x); }
inline float gelu_slope_vec(float x) {
  float hi, lo;
  minus_half_square(x, &hi, &lo);
  const float pdf = exp_parts(hi, lo) * 0.39894228040143267794f;  // 1 / sqrt(2 pi)
  return normal_cdf_vec(x) + x * pdf;
}
inline float gelu_bwd_vec(float x, float gy) { return gy * gelu_slope_vec(x); }

}  // namespace kernels::cpu

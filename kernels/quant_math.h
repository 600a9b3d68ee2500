// 8-bit optimizer state: block-wise quantisation with one FP32 absmax per block of 256 values
// and logarithmic ("dynamic exponent") codes, after Dettmers et al., "8-bit Optimizers via
// Block-wise Quantization" (ICLR 2022): per-block scaling keeps an outlier from flattening the
// rest of the tensor, and a non-linear code keeps relative precision over many octaves, which
// Adam's second moment needs. Our codes (written for this engine, shared by CPU and GPU):
//
//   signed (Adam's first moment, SGD momentum): bit 7 the sign, k = bits 0..6:
//     k = 0 -> 0;  k = 1..127 -> absmax * 2^-((127 - k) / 8)   (8 steps per octave, 15.75 octaves)
//   unsigned (Adam's second moment, never negative): k = 0 -> 0 (exact zeros only);
//     k = 1..255 -> absmax * 2^-((255 - k) / 16)                 (16 steps per octave, 15.9 octaves)
//
// Rounding is to the nearest code in log2, so a value inside the range comes back within a
// factor 2^(1/16) (signed: 4.4%) or 2^(1/32) (unsigned: 2.2%). Below the range, signed values
// go to the smallest code or to zero, whichever is nearer; unsigned values go UP to the
// smallest code, never to zero, so Adam's sqrt(v) in the denominator cannot collapse. Encoding
// uses frexp and comparisons against fixed thresholds (no log2), and decoding multiplies by
// fixed constants and a power of two, so CPU and GPU produce the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/hd.h"

namespace kernels {

constexpr int64_t kQuantBlock = 256;  // values per absmax

namespace quant_detail {
// 2^(-j/8) and the rounding thresholds 2^(-(j + 0.5)/8), j = 0..7 (9 digits: the float nearest).
ENGINE_HD float step8(int j) {
  constexpr float v[8] = {1.0f, 0.917004043f, 0.840896415f, 0.771105413f,
                          0.707106781f, 0.648419777f, 0.594603558f, 0.545253866f};
  return v[j];
}
ENGINE_HD float mid8(int j) {
  constexpr float v[8] = {0.957603281f, 0.87812608f, 0.805245166f, 0.738413073f,
                          0.677127773f, 0.620928906f, 0.569394317f, 0.522136891f};
  return v[j];
}
// 2^(-j/16) and 2^(-(j + 0.5)/16), j = 0..15.
ENGINE_HD float step16(int j) {
  constexpr float v[16] = {1.0f, 0.957603281f, 0.917004043f, 0.87812608f, 0.840896415f, 0.805245166f,
                          0.771105413f, 0.738413073f, 0.707106781f, 0.677127773f, 0.648419777f, 0.620928906f,
                          0.594603558f, 0.569394317f, 0.545253866f, 0.522136891f};
  return v[j];
}
ENGINE_HD float mid16(int j) {
  constexpr float v[16] = {0.978572062f, 0.937083817f, 0.897354538f, 0.859309649f, 0.822877739f, 0.787990423f,
                          0.754582214f, 0.722590403f, 0.691954941f, 0.662618322f, 0.634525479f, 0.60762368f,
                          0.581862429f, 0.557193371f, 0.5335702f, 0.510948574f};
  return v[j];
}

// For 0 < r <= 1: t = round(-steps * log2(r)) in log2 (steps = 8 or 16), from frexp and the
// thresholds: r = mant * 2^ex with mant in [0.5, 1); -log2(r) = -ex - log2(mant).
template <int Steps> ENGINE_HD int log_steps_below(float r) {
  int ex = 0;
  const float mant = frexpf(r, &ex);  // r = mant * 2^ex, mant in [0.5, 1)
  // -log2(mant) in (0, 1]: count the thresholds 2^-((j+0.5)/Steps) of the octave above mant*2.
  const float m2 = mant * 2.0f;  // in [1, 2): -log2(mant) = 1 - log2(m2)
  int below = 0;                 // round(Steps * log2(m2)) in 0..Steps
  for (int j = 0; j < Steps; ++j) below += m2 * (Steps == 8 ? mid8(Steps - 1 - j) : mid16(Steps - 1 - j)) >= 1.0f;
  // Steps * (-ex + 1) - round(Steps * log2(m2))
  return Steps * (1 - ex) - below;
}
}  // namespace quant_detail

// absmax > 0 and finite; |x| <= absmax.
ENGINE_HD uint8_t encode_signed(float x, float absmax) {
  if (x == 0.0f) return 0;
  const float r = fabsf(x) / absmax;
  int k;
  // Below the codes' range (log-nearer zero than the smallest code, 2^-15.75) frexp is never
  // asked: r may even have underflowed to 0 there. Nearer in value to the smallest code or to 0?
  if (!(r >= 1.73765356e-05f)) k = r >= 0.5f * 1.81458605e-05f ? 1 : 0;  // 2^-15.8125, 2^-15.75
  else k = 127 - quant_detail::log_steps_below<8>(r);  // t = 0 for r = 1, at most 126 here
  return static_cast<uint8_t>((x < 0.0f && k > 0 ? 0x80 : 0) | k);
}

ENGINE_HD float decode_signed(uint8_t q, float absmax) {
  const int k = q & 0x7f;
  if (k == 0) return 0.0f;
  const int t = 127 - k;
  const float v = ldexpf(absmax * quant_detail::step8(t % 8), -(t / 8));
  return (q & 0x80) ? -v : v;
}

// x >= 0 (a second moment); absmax > 0 and finite; x <= absmax.
ENGINE_HD uint8_t encode_unsigned(float x, float absmax) {
  if (x <= 0.0f) return 0;
  const float r = x / absmax;
  if (!(r >= 1.62832703e-05f)) return 1;  // below 2^-15.90625 (or underflowed): up to the smallest code
  return static_cast<uint8_t>(255 - quant_detail::log_steps_below<16>(r));
}

ENGINE_HD float decode_unsigned(uint8_t q, float absmax) {
  if (q == 0) return 0.0f;
  const int t = 255 - q;
  return ldexpf(absmax * quant_detail::step16(t % 16), -(t / 16));
}

}  // namespace kernels

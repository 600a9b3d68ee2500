// Tensors built to hit every bucket of the range report, the count made directly from the
// definitions, the comparison, and a NaN-making layer (shared by tests/test_numerics.cpp and
// its [cuda] twin).
#pragma once

#include <cfloat>
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/nn.h"
#include "engine/numerics.h"

namespace numerics_cases {

// Each edge, exactly and a step either side, in every sign; plus inf, NaN and ordinary values.
inline std::vector<double> bucket_values() {
  const double e25 = std::ldexp(1.0, -25), e24 = std::ldexp(1.0, -24), e15 = std::ldexp(1.0, -15),
               e14 = std::ldexp(1.0, -14);
  std::vector<double> v = {0.0, -0.0, 0.0, e24, -e24, 1023 * e24, e14, -e14, e14 * (1 + 1.0 / 1024),
                           e15, e15 * (1 + 1.0 / 128), e15 * (1 - 1.0 / 256), e25, -e25, e25 * (1 + 1.0 / 128),
                           1e-30, -1e-38, 1.0, -3.5, 32736.0, 32752.0, -32752.0, 65504.0, 65519.0, 65520.0,
                           -65520.0, 1e5, -3e38,
                           INFINITY, -INFINITY, NAN, NAN, 0.25};
  for (int i = 0; i < 50; ++i) v.push_back(std::ldexp(1.0 + i / 64.0, -30 + i));  // a sweep through the edges
  return v;
}

// The definitions, applied to the stored values (as doubles): see kernels/range_math.h.
inline engine::RangeStats direct_count(const std::vector<double>& stored, double scale) {
  engine::RangeStats s;
  s.count = static_cast<int64_t>(stored.size());
  for (double x : stored) {
    if (std::isnan(x)) { ++s.nan; continue; }
    if (std::isinf(x) || std::fabs(x) > FLT_MAX) { ++s.inf; continue; }
    const double a = std::fabs(x);
    if (a == 0) { ++s.zeros; continue; }
    s.absmax = std::max(s.absmax, a);
    if (a <= std::ldexp(1.0, -25)) ++s.flush;
    else if (a < std::ldexp(1.0, -14)) ++s.subnormal;
    if (a <= std::ldexp(1.0, -25) * scale) ++s.flush_unscaled;
    if (a >= 65520.0) ++s.overflow;
    else if (a >= 32752.0) ++s.near_overflow;
  }
  return s;
}

// Every count and the absmax agree.
inline void require_same(const engine::RangeStats& got, const engine::RangeStats& want) {
  CHECK(got.count == want.count);
  CHECK(got.zeros == want.zeros);
  CHECK(got.subnormal == want.subnormal);
  CHECK(got.flush == want.flush);
  CHECK(got.flush_unscaled == want.flush_unscaled);
  CHECK(got.near_overflow == want.near_overflow);
  CHECK(got.overflow == want.overflow);
  CHECK(got.inf == want.inf);
  CHECK(got.nan == want.nan);
  CHECK(got.absmax == want.absmax);
}

// y = x * NaN: a fault in forward.
class NanForward : public engine::Module {
 public:
  engine::Tensor forward(const engine::Tensor& x) override { return engine::scale(x, NAN); }
  std::string describe() const override { return "NanForward"; }
};

}  // namespace numerics_cases

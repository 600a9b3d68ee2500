// Tests of kernels/numeric.h (FP16/BF16 conversions) against references computed in double,
// and, when the toolkit headers are present, against CUDA's own host conversions; Philox KATs.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "kernels/convert.h"
#include "kernels/numeric.h"
#include "kernels/philox.h"

#if defined(ENGINE_HAVE_CUDA_HEADERS)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

// cuda_fp16.h declares a global `half`, so the engine's types are always named in full here.
using kernels::bf16_bits_to_float;
using kernels::double_to_bf16_bits;
using kernels::double_to_half_bits;
using kernels::float_to_bf16_bits;
using kernels::float_to_half_bits;
using kernels::half_bits_to_float;

namespace {

// ---- Independent references ----------------------------------------------------------------

// A small IEEE-style binary format described by its field widths.
struct Format {
  int exp_bits;
  int man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  uint16_t exp_mask() const { return static_cast<uint16_t>(((1 << exp_bits) - 1) << man_bits); }
  uint16_t man_mask() const { return static_cast<uint16_t>((1 << man_bits) - 1); }
  uint16_t max_finite_bits() const { return static_cast<uint16_t>(exp_mask() - 1); }
  uint16_t inf_bits() const { return exp_mask(); }
  uint16_t sign_bit() const { return 0x8000; }
};
constexpr Format kHalfFmt{5, 10};
constexpr Format kBf16Fmt{8, 7};

// Decode from the definition: (-1)^s * 1.m * 2^(e - bias), or 0.m * 2^emin for e == 0.
double ref_decode(Format f, uint16_t b) {
  const bool neg = (b & 0x8000) != 0;
  const int e = (b & f.exp_mask()) >> f.man_bits;
  const int m = b & f.man_mask();
  double v;
  if (e == (1 << f.exp_bits) - 1) {
    v = m ? NAN : INFINITY;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), f.emin() - f.man_bits);
  } else {
    v = std::ldexp(static_cast<double>(m + (1 << f.man_bits)), e - f.bias() - f.man_bits);
  }
  return neg ? -v : v;
}

// Round x (not NaN) to the format with ties to even, in double: the quantum at x's binade
// (never below the subnormal quantum), then nearbyint under the default rounding mode.
double ref_round(Format f, double x) {
  const double a = std::fabs(x);
  const double max_finite = ref_decode(f, f.max_finite_bits());
  // Half an ulp above the largest finite value is a tie whose even neighbour is 2^(emax+1).
  const double overflow = max_finite + std::ldexp(1.0, f.bias() - f.man_bits - 1);
  double r;
  if (a >= overflow) {
    r = INFINITY;
  } else if (a == 0) {
    r = 0;
  } else {
    int e;
    std::frexp(a, &e);  // a in [2^(e-1), 2^e)
    const int qexp = std::max(e - 1, f.emin()) - f.man_bits;
    r = std::ldexp(std::nearbyint(std::ldexp(a, -qexp)), qexp);
  }
  return std::copysign(r, x);
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Counts failures inside big loops and keeps the first few, so Catch reports one assertion.
struct Failures {
  int count = 0;
  std::string first;
  void add(const std::string& what) {
    if (count++ < 5) first += what + "\n";
  }
};

float float_from_bits(uint32_t u) { return kernels::bits_float(u); }

// The float inputs that decide rounding: for each finite value v of the format and its upper
// neighbour, the midpoint (exact in float: one more bit than the format) and the floats just
// beside it, for both signs; the top value's neighbour is the first power of two past max.
std::vector<float> rounding_probes(Format f) {
  std::vector<float> out;
  for (uint32_t b = 0; b <= f.max_finite_bits(); ++b) {
    const double lo = ref_decode(f, static_cast<uint16_t>(b));
    const double hi = b == f.max_finite_bits()
                          ? std::ldexp(1.0, f.bias() + 1)
                          : ref_decode(f, static_cast<uint16_t>(b + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);
    for (float p : {mid, std::nextafter(mid, INFINITY), std::nextafter(mid, 0.0f),
                    static_cast<float>(lo)}) {
      out.push_back(p);
      out.push_back(-p);
    }
  }
  return out;
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<float> out;
  out.reserve(n);
  while (out.size() < n) {
    const float f = float_from_bits(gen());
    if (!std::isnan(f)) out.push_back(f);
  }
  return out;
}

// Random doubles spread over the binades that matter for both formats.
std::vector<double> random_doubles(size_t n, uint32_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int> exps(-140, 130);
  std::vector<double> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const double m = 1.0 + static_cast<double>(gen() >> 11) * 0x1p-53;  // [1, 2), 52 bits
    const double v = std::ldexp(m, exps(gen));
    out.push_back((gen() & 1) ? -v : v);
  }
  return out;
}

void check_float_rounding(Format fmt, uint16_t (*convert)(float), const std::vector<float>& xs) {
  Failures fails;
  for (float x : xs) {
    const uint16_t got = convert(x);
    const double want = ref_round(fmt, x);
    if (!same_value(ref_decode(fmt, got), want)) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "x=%.9g (%s) got %s want %.17g", x,
                    hex(kernels::float_bits(x)).c_str(), hex(got).c_str(), want);
      fails.add(buf);
    }
  }
  INFO(fails.first);
  CHECK(fails.count == 0);
}

void check_double_rounding(Format fmt, uint16_t (*convert)(double), const std::vector<double>& xs) {
  Failures fails;
  for (double x : xs) {
    const uint16_t got = convert(x);
    const double want = ref_round(fmt, x);
    if (!same_value(ref_decode(fmt, got), want)) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "x=%.17g got %s want %.17g", x, hex(got).c_str(), want);
      fails.add(buf);
    }
  }
  INFO(fails.first);
  CHECK(fails.count == 0);
}

// Double probes: the float probes, plus values a hair off each midpoint that collapse onto
// the midpoint when first rounded to float (the double-rounding trap).
std::vector<double> double_probes(Format f) {
  std::vector<double> out;
  for (float p : rounding_probes(f)) {
    const double d = p;
    out.push_back(d);
    out.push_back(std::nextafter(d, INFINITY));
    out.push_back(std::nextafter(d, -INFINITY));
    out.push_back(d * (1 + 0x1p-40));
    out.push_back(d * (1 - 0x1p-40));
  }
  return out;
}

}  // namespace

// ---- FP16 ---------------------------------------------------------------------------------------

TEST_CASE("half: every bit pattern widens exactly", "[numeric]") {
  Failures fails;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = half_bits_to_float(static_cast<uint16_t>(b));
    const double want = ref_decode(kHalfFmt, static_cast<uint16_t>(b));
    bool ok = same_value(got, want);
    if (std::isnan(got)) ok = ok && (kernels::float_bits(got) & 0x400000u);  // quiet
    if (!ok) fails.add(hex(b));
  }
  INFO(fails.first);
  CHECK(fails.count == 0);
  CHECK(half_bits_to_float(0x7bff) == kernels::kHalfMax);
  CHECK(half_bits_to_float(0x0400) == kernels::kHalfMinNormal);
  CHECK(half_bits_to_float(0x0001) == kernels::kHalfMinSubnormal);
}

TEST_CASE("half: every non-NaN pattern round-trips through float", "[numeric]") {
  Failures fails;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = half_bits_to_float(static_cast<uint16_t>(b));
    const uint16_t back = float_to_half_bits(f);
    const bool nan_in = (b & 0x7c00) == 0x7c00 && (b & 0x3ff);
    const bool ok = nan_in ? ((back & 0x7c00) == 0x7c00 && (back & 0x200))  // quiet NaN
                           : back == b;
    if (!ok) fails.add(hex(b) + " -> " + hex(back));
    // The double path must agree on every exact value too.
    if (!nan_in && double_to_half_bits(f) != b) fails.add("double " + hex(b));
  }
  INFO(fails.first);
  CHECK(fails.count == 0);
}

TEST_CASE("half: rounding cases", "[numeric]") {
  const float u = 0x1p-11f;  // half an ulp at 1
  CHECK(float_to_half_bits(1.0f + u) == 0x3c00);          // tie -> even (1.0)
  CHECK(float_to_half_bits(1.0f + 3 * u) == 0x3c02);      // tie -> even (1 + 2^-9)
  CHECK(float_to_half_bits(std::nextafter(1.0f + u, 2.0f)) == 0x3c01);
  CHECK(float_to_half_bits(-(1.0f + u)) == 0xbc00);
  CHECK(float_to_half_bits(2047.0f) == 0x67ff);           // exact
  CHECK(float_to_half_bits(2049.0f) == 0x6800);           // tie at 2048 + 1 -> 2048
  CHECK(float_to_half_bits(2051.0f) == 0x6802);           // tie -> 2052
  // Overflow: 65520 is the tie between 65504 and 65536, and 65536's mantissa is even.
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);
  CHECK(float_to_half_bits(65519.99f) == 0x7bff);
  CHECK(float_to_half_bits(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);
  CHECK(float_to_half_bits(-65520.0f) == 0xfc00);
  CHECK(float_to_half_bits(1e10f) == 0x7c00);
  CHECK(float_to_half_bits(FLT_MAX) == 0x7c00);
  CHECK(float_to_half_bits(INFINITY) == 0x7c00);
  CHECK(float_to_half_bits(-INFINITY) == 0xfc00);
  // Zeros and subnormals.
  CHECK(float_to_half_bits(0.0f) == 0x0000);
  CHECK(float_to_half_bits(-0.0f) == 0x8000);
  CHECK(std::signbit(half_bits_to_float(0x8000)));
  CHECK(float_to_half_bits(0x1p-25f) == 0x0000);                         // tie with 0 -> 0
  CHECK(float_to_half_bits(-0x1p-25f) == 0x8000);
  CHECK(float_to_half_bits(std::nextafter(0x1p-25f, 1.0f)) == 0x0001);
  CHECK(float_to_half_bits(0x1.8p-24f) == 0x0002);                        // 1.5 -> 2
  CHECK(float_to_half_bits(0x1.4p-23f) == 0x0002);                        // 2.5 -> 2
  CHECK(float_to_half_bits(0x3p-24f) == 0x0003);
  CHECK(float_to_half_bits(1023.5f * 0x1p-24f) == 0x0400);               // tie -> min normal
  CHECK(float_to_half_bits(1022.5f * 0x1p-24f) == 0x03fe);
  CHECK(float_to_half_bits(FLT_TRUE_MIN) == 0x0000);
  CHECK(float_to_half_bits(-FLT_MIN) == 0x8000);
  CHECK(float_to_half_bits(kernels::kHalfMinNormal) == 0x0400);
  CHECK(float_to_half_bits(kernels::kHalfMinSubnormal) == 0x0001);
}

TEST_CASE("half: NaN stays a quiet NaN", "[numeric]") {
  for (uint32_t x : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00000u, 0xff800001u,
                     0x7f802000u, 0x7fa00000u}) {
    const uint16_t h = float_to_half_bits(float_from_bits(x));
    INFO(hex(x) << " -> " << hex(h));
    CHECK((h & 0x7c00) == 0x7c00);
    CHECK((h & 0x200) != 0);
    CHECK((h & 0x8000) == ((x >> 16) & 0x8000));
    CHECK(double_to_half_bits(std::nan("")) != 0x7c00);
  }
  CHECK(std::isnan(half_bits_to_float(0x7c01)));  // signalling half NaN widens to a NaN...
  CHECK((kernels::float_bits(half_bits_to_float(0x7c01)) & 0x400000u) != 0);  // ...quiet
}

TEST_CASE("half: float rounding at every midpoint and on random floats", "[numeric]") {
  check_float_rounding(kHalfFmt, float_to_half_bits, rounding_probes(kHalfFmt));
  check_float_rounding(kHalfFmt, float_to_half_bits, random_floats(1 << 20, 12345));
  // Random floats cluster at large magnitudes; also sweep the half range densely.
  std::vector<float> dense;
  for (uint32_t x = 0x33000000u; x < 0x47800000u; x += 97) dense.push_back(float_from_bits(x));
  check_float_rounding(kHalfFmt, float_to_half_bits, dense);
}

TEST_CASE("half: the bit-manipulation reference agrees with the conversions in use", "[numeric]") {
  // On x86 with F16C the conversions above run in hardware; the software versions (what the
  // GPU and other hosts run) must then be checked on their own: widening on every pattern,
  // narrowing against the same reference rounding on every probe.
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float soft = kernels::half_bits_to_float_soft(static_cast<uint16_t>(h));
    const float ref = half_bits_to_float(static_cast<uint16_t>(h));
    if (std::isnan(ref)) REQUIRE(std::isnan(soft));
    else REQUIRE(kernels::float_bits(soft) == kernels::float_bits(ref));
  }
  check_float_rounding(kHalfFmt, kernels::float_to_half_bits_soft, rounding_probes(kHalfFmt));
  check_float_rounding(kHalfFmt, kernels::float_to_half_bits_soft, random_floats(1 << 20, 777));
}

TEST_CASE("half: the branch-free (SIMD) conversions agree on every pattern and midpoint", "[numeric]") {
  // What vectorised CPU loops use (load_simd/store_simd): widening on all 65,536 patterns
  // bit for bit (NaNs included: same payload, quiet bit set), narrowing on every rounding
  // probe, on random floats and densely across the half range.
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    REQUIRE(kernels::float_bits(kernels::half_bits_to_float_simd(b)) ==
            kernels::float_bits(kernels::half_bits_to_float_soft(b)));
    REQUIRE(kernels::float_bits(kernels::load_simd(kernels::half::from_bits(b))) ==
            kernels::float_bits(kernels::half_bits_to_float_soft(b)));
  }
  check_float_rounding(kHalfFmt, kernels::float_to_half_bits_simd, rounding_probes(kHalfFmt));
  check_float_rounding(kHalfFmt, kernels::float_to_half_bits_simd, random_floats(1 << 20, 4242));
  std::vector<float> dense;
  for (uint32_t x = 0x33000000u; x < 0x47800000u; x += 89) dense.push_back(float_from_bits(x));
  check_float_rounding(kHalfFmt, kernels::float_to_half_bits_simd, dense);
  // NaN payloads and signs narrow exactly as the reference does.
  for (uint32_t x : {0x7f800001u, 0x7fc00000u, 0xffbfffffu, 0x7f802000u, 0xff800000u, 0x7f800000u})
    CHECK(kernels::float_to_half_bits_simd(float_from_bits(x)) == kernels::float_to_half_bits_soft(float_from_bits(x)));
  CHECK(kernels::store_simd<kernels::half>(1.0f + 0x1p-11f).bits == 0x3c00);  // tie -> even
}

TEST_CASE("half: double rounding is done once", "[numeric]") {
  // 1 + 2^-11 + 2^-40 is above the tie; via float it would become the tie and go to 1.0.
  const double d = 1.0 + 0x1p-11 + 0x1p-40;
  CHECK(float_to_half_bits(static_cast<float>(d)) == 0x3c00);
  CHECK(double_to_half_bits(d) == 0x3c01);
  CHECK(kernels::half(d).bits == 0x3c01);
  CHECK(kernels::half_from_double(d).bits == 0x3c01);
  CHECK(double_to_half_bits(65520.0) == 0x7c00);
  CHECK(double_to_half_bits(std::nextafter(65520.0, 0.0)) == 0x7bff);
  CHECK(double_to_half_bits(0x1p-25) == 0x0000);
  CHECK(double_to_half_bits(0x1p-25 + 0x1p-70) == 0x0001);
  CHECK(double_to_half_bits(-0.0) == 0x8000);
  CHECK(double_to_half_bits(DBL_TRUE_MIN) == 0x0000);
  CHECK(double_to_half_bits(-INFINITY) == 0xfc00);
  check_double_rounding(kHalfFmt, double_to_half_bits, double_probes(kHalfFmt));
  check_double_rounding(kHalfFmt, double_to_half_bits, random_doubles(1 << 19, 777));
}

// ---- BF16 ---------------------------------------------------------------------------------------

TEST_CASE("bfloat16: every bit pattern widens exactly", "[numeric]") {
  Failures fails;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = bf16_bits_to_float(static_cast<uint16_t>(b));
    if (!same_value(got, ref_decode(kBf16Fmt, static_cast<uint16_t>(b)))) fails.add(hex(b));
  }
  INFO(fails.first);
  CHECK(fails.count == 0);
  CHECK(bf16_bits_to_float(0x7f7f) == kernels::kBf16Max);
  CHECK(bf16_bits_to_float(0x0080) == kernels::kBf16MinNormal);
  CHECK(bf16_bits_to_float(0x0001) == kernels::kBf16MinSubnormal);
}

TEST_CASE("bfloat16: every non-NaN pattern round-trips through float", "[numeric]") {
  Failures fails;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    const uint16_t back = float_to_bf16_bits(f);
    const bool nan_in = (b & 0x7f80) == 0x7f80 && (b & 0x7f);
    const bool ok = nan_in ? ((back & 0x7f80) == 0x7f80 && (back & 0x40)) : back == b;
    if (!ok) fails.add(hex(b) + " -> " + hex(back));
    if (!nan_in && double_to_bf16_bits(f) != b) fails.add("double " + hex(b));
  }
  INFO(fails.first);
  CHECK(fails.count == 0);
}

TEST_CASE("bfloat16: the branch-free (SIMD) rounding gives the same bits", "[numeric]") {
  // float_to_bf16_bits_simd (store_simd, the tile kernels' stores) against float_to_bf16_bits:
  // every bf16 pattern with each low half that decides the rounding (0, below, at and above the
  // tie, odd and even), NaN payloads included, and a million random floats.
  Failures fails;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float f = float_from_bits(hi << 16 | lo);
      if (kernels::float_to_bf16_bits_simd(f) != float_to_bf16_bits(f)) fails.add(hex(hi << 16 | lo));
    }
  for (float f : random_floats(1 << 20, 1717))
    if (kernels::float_to_bf16_bits_simd(f) != float_to_bf16_bits(f)) fails.add(hex(kernels::float_bits(f)));
  INFO(fails.first);
  CHECK(fails.count == 0);
  CHECK(kernels::store_simd<kernels::bfloat16>(1.0f + 0x1p-8f).bits == 0x3f80);  // tie -> even
}

TEST_CASE("bfloat16: the tile kernels' rounding flushes FP32 denormals, as VCVTNEPS2BF16 does", "[numeric]") {
  // Intel's definition of convert_fp32_to_bfloat16: a zero or denormal input gives a zero of its
  // sign; everything else (NaN, inf, normal) rounds as float_to_bf16_bits.
  for (uint32_t x : {0x00000001u, 0x007fffffu, 0x00400000u, 0x80000001u, 0x807fffffu, 0x00000000u, 0x80000000u})
    CHECK(kernels::float_to_bf16_bits_ftz(float_from_bits(x)) == ((x >> 16) & 0x8000u));
  Failures fails;
  for (float f : random_floats(1 << 20, 1818)) {
    const uint32_t x = kernels::float_bits(f);
    if ((x & 0x7f800000u) != 0 && kernels::float_to_bf16_bits_ftz(f) != float_to_bf16_bits(f)) fails.add(hex(x));
  }
  for (uint32_t x : {0x00800000u, 0x80800000u, 0x7f800000u, 0x7f800001u, 0xffc00000u, 0x7f7fffffu, 0x3f808000u})
    if (kernels::float_to_bf16_bits_ftz(float_from_bits(x)) != float_to_bf16_bits(float_from_bits(x))) fails.add(hex(x));
  INFO(fails.first);
  CHECK(fails.count == 0);
}

TEST_CASE("bfloat16: rounding cases", "[numeric]") {
  const float u = 0x1p-8f;  // half an ulp at 1
  CHECK(float_to_bf16_bits(1.0f + u) == 0x3f80);           // tie -> even
  CHECK(float_to_bf16_bits(1.0f + 3 * u) == 0x3f82);       // tie -> even
  CHECK(float_to_bf16_bits(std::nextafter(1.0f + u, 2.0f)) == 0x3f81);
  CHECK(float_to_bf16_bits(-(1.0f + 3 * u)) == 0xbf82);
  CHECK(float_to_bf16_bits(0.0f) == 0x0000);
  CHECK(float_to_bf16_bits(-0.0f) == 0x8000);
  // Overflow: the tie above max rounds to inf; FLT_MAX is past it.
  CHECK(float_to_bf16_bits(float_from_bits(0x7f7f7fffu)) == 0x7f7f);
  CHECK(float_to_bf16_bits(float_from_bits(0x7f7f8000u)) == 0x7f80);
  CHECK(float_to_bf16_bits(FLT_MAX) == 0x7f80);
  CHECK(float_to_bf16_bits(-FLT_MAX) == 0xff80);
  CHECK(float_to_bf16_bits(INFINITY) == 0x7f80);
  // Float subnormals round like everything else (bf16 has the same exponent range).
  CHECK(float_to_bf16_bits(float_from_bits(0x00008000u)) == 0x0000);  // tie -> 0
  CHECK(float_to_bf16_bits(float_from_bits(0x00008001u)) == 0x0001);
  CHECK(float_to_bf16_bits(float_from_bits(0x00018000u)) == 0x0002);  // tie -> even
  CHECK(float_to_bf16_bits(float_from_bits(0x007fffffu)) == 0x0080);  // up to min normal
}

TEST_CASE("bfloat16: NaN stays a quiet NaN, never inf", "[numeric]") {
  // 0x7f800001 would round to inf and 0x7fffffff would carry into the sign without the check.
  for (uint32_t x : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffc00000u, 0xff800001u,
                     0xffffffffu, 0x7f80ffffu}) {
    const uint16_t b = float_to_bf16_bits(float_from_bits(x));
    INFO(hex(x) << " -> " << hex(b));
    CHECK((b & 0x7f80) == 0x7f80);
    CHECK((b & 0x40) != 0);
    CHECK((b & 0x8000) == ((x >> 16) & 0x8000));
    CHECK(std::isnan(bf16_bits_to_float(b)));
  }
  const uint16_t d = double_to_bf16_bits(-std::nan(""));
  CHECK(std::isnan(bf16_bits_to_float(d)));
}

TEST_CASE("bfloat16: float rounding at every midpoint and on random floats", "[numeric]") {
  check_float_rounding(kBf16Fmt, float_to_bf16_bits, rounding_probes(kBf16Fmt));
  check_float_rounding(kBf16Fmt, float_to_bf16_bits, random_floats(1 << 20, 54321));
}

TEST_CASE("bfloat16: double rounding is done once", "[numeric]") {
  const double d = 1.0 + 0x1p-8 + 0x1p-40;
  CHECK(float_to_bf16_bits(static_cast<float>(d)) == 0x3f80);
  CHECK(double_to_bf16_bits(d) == 0x3f81);
  CHECK(kernels::bfloat16(d).bits == 0x3f81);
  CHECK(kernels::bfloat16_from_double(d).bits == 0x3f81);
  CHECK(double_to_bf16_bits(1e300) == 0x7f80);
  CHECK(double_to_bf16_bits(-1e-300) == 0x8000);
  check_double_rounding(kBf16Fmt, double_to_bf16_bits, double_probes(kBf16Fmt));
  check_double_rounding(kBf16Fmt, double_to_bf16_bits, random_doubles(1 << 19, 999));
}

// ---- FP32 <-> FP64 ------------------------------------------------------------------------------

TEST_CASE("FP32 <-> FP64: a NaN keeps sign and payload and comes out quiet; the rest is the cast", "[numeric]") {
  auto dbits = [](double d) { uint64_t u; std::memcpy(&u, &d, sizeof u); return u; };
  auto dfrom = [](uint64_t u) { double d; std::memcpy(&d, &u, sizeof d); return d; };
  // Expected bits written out by hand from the rule: narrowing keeps the sign and the top 23 of
  // the 52 payload bits (bits 51..29) and sets bit 22; widening puts the 23 bits at 51..29.
  struct Narrow { uint64_t in; uint32_t out; };
  for (const Narrow& c : {Narrow{0x7ff8000000000000ull, 0x7fc00000u},   // the default quiet NaN
                          Narrow{0xfff8000000000000ull, 0xffc00000u},   // its negative
                          Narrow{0x7ff0000000000001ull, 0x7fc00000u},   // signalling, payload below bit 29
                          Narrow{0x7ff4000000000000ull, 0x7fe00000u},   // signalling, payload bit 50
                          Narrow{0xfffffffffffffffful, 0xffffffffu},    // every payload bit
                          Narrow{0x7ff80000deadbeefull, 0x7fc00006u}}) {  // bits 31..29 of 0xdeadbeef = 110
    INFO(std::hex << c.in);
    const float f = kernels::double_to_float(dfrom(c.in));
    CHECK(kernels::float_bits(f) == c.out);
    CHECK(kernels::float_bits(kernels::convert<float>(dfrom(c.in))) == c.out);
  }
  struct Widen { uint32_t in; uint64_t out; };
  for (const Widen& c : {Widen{0x7fc00000u, 0x7ff8000000000000ull}, Widen{0xffc00000u, 0xfff8000000000000ull},
                         Widen{0x7f800001u, 0x7ff8000020000000ull}, Widen{0x7fffffffu, 0x7fffffffe0000000ull},
                         Widen{0xff812345u, 0xfff82468a0000000ull}}) {
    INFO(std::hex << c.in);
    CHECK(dbits(kernels::float_to_double(float_from_bits(c.in))) == c.out);
    CHECK(dbits(kernels::convert<double>(float_from_bits(c.in))) == c.out);
  }
  // half and bf16 widen to double through float: the payload survives both steps.
  CHECK(dbits(kernels::convert<double>(kernels::half::from_bits(0xfe01))) == 0xfff8040000000000ull);
  CHECK(dbits(kernels::convert<double>(kernels::bfloat16::from_bits(0x7f81))) == 0x7ff8200000000000ull);
  // Everything that is not a NaN converts exactly as the cast does.
  for (double d : {0.0, -0.0, 1.0, -1.5, 1e-310, 3.4028235677973366e38, 3.4028235677973367e38, 1e39, -1e-46,
                   std::ldexp(1.0, -149), std::ldexp(1.0, -150), std::ldexp(1.5, -150), 0.1,
                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()}) {
    INFO(d);
    CHECK(kernels::float_bits(kernels::double_to_float(d)) == kernels::float_bits(static_cast<float>(d)));
    const float f = static_cast<float>(d);
    CHECK(dbits(kernels::float_to_double(f)) == dbits(static_cast<double>(f)));
  }
#if defined(__x86_64__)
  // x86's cvtsd2ss/cvtss2sd follow the same NaN rule: the host cast and ours agree bit for bit
  // (the GPU's cvt does not, hence the rule; tests/cuda checks the device side).
  for (uint64_t in : {0x7ff0000000000001ull, 0xfff4000000000000ull, 0x7ff80000deadbeefull}) {
    volatile double d = dfrom(in);  // volatile: the conversion happens at run time, in hardware
    CHECK(kernels::float_bits(static_cast<float>(d)) == kernels::float_bits(kernels::double_to_float(d)));
  }
#endif
}

// ---- Types and accumulation ---------------------------------------------------------------------

TEST_CASE("storage types convert and accumulate as documented", "[numeric]") {
  static_assert(std::is_same<kernels::acc_t<kernels::half>, float>::value, "");
  static_assert(std::is_same<kernels::acc_t<kernels::bfloat16>, float>::value, "");
  static_assert(std::is_same<kernels::acc_t<float>, float>::value, "");
  static_assert(std::is_same<kernels::acc_t<double>, double>::value, "");

  CHECK(kernels::half(1.5f).bits == 0x3e00);
  CHECK(kernels::half(2).bits == 0x4000);
  CHECK(kernels::half(70000L).bits == 0x7c00);
  CHECK(kernels::bfloat16(3u).bits == 0x4040);
  CHECK(kernels::half::from_bits(0x3555).bits == 0x3555);
  CHECK(kernels::bfloat16::from_bits(0xc2f7).bits == 0xc2f7);
  const kernels::half a(0.5f), b(0.25f);
  CHECK(a * b == 0.125f);  // arithmetic through the implicit float conversion
  CHECK(static_cast<float>(kernels::bfloat16(-2.0f)) == -2.0f);

  CHECK(kernels::from_acc<kernels::half>(1.0f + 0x1p-11f).bits == 0x3c00);
  CHECK(kernels::from_acc<kernels::half>(1.0f + 0x1.8p-11f).bits == 0x3c01);
  CHECK(kernels::from_acc<kernels::bfloat16>(1.0f + 0x1p-8f).bits == 0x3f80);
  CHECK(kernels::from_acc<float>(0.1f) == 0.1f);
  CHECK(kernels::from_acc<double>(0.1) == 0.1);
}

// ---- Against CUDA's own conversions ---------------------------------------------------------

#if defined(ENGINE_HAVE_CUDA_HEADERS)
TEST_CASE("conversions match cuda_fp16.h / cuda_bf16.h bit for bit", "[numeric][cuda_headers]") {
  auto cuda_half_bits = [](float f) {
    const __half h = __float2half_rn(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  };
  auto cuda_bf16_bits = [](float f) {
    const __nv_bfloat16 h = __float2bfloat16_rn(f);
    uint16_t b;
    std::memcpy(&b, &h, 2);
    return b;
  };

  Failures widen;
  for (uint32_t b = 0; b < 65536; ++b) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(b);
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(b);
    const float ours_h = half_bits_to_float(static_cast<uint16_t>(b));
    const float cuda_h = __half2float(__half(hr));
    const float ours_b = bf16_bits_to_float(static_cast<uint16_t>(b));
    const float cuda_b = __bfloat162float(__nv_bfloat16(br));
    if (!(std::isnan(ours_h) && std::isnan(cuda_h)) &&
        kernels::float_bits(ours_h) != kernels::float_bits(cuda_h))
      widen.add("half " + hex(b));
    if (!(std::isnan(ours_b) && std::isnan(cuda_b)) &&
        kernels::float_bits(ours_b) != kernels::float_bits(cuda_b))
      widen.add("bf16 " + hex(b));
  }
  INFO(widen.first);
  CHECK(widen.count == 0);

  std::vector<float> xs = rounding_probes(kHalfFmt);
  const std::vector<float> pb = rounding_probes(kBf16Fmt);
  xs.insert(xs.end(), pb.begin(), pb.end());
  const std::vector<float> rnd = random_floats(1 << 20, 2024);
  xs.insert(xs.end(), rnd.begin(), rnd.end());
  for (uint32_t s : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                     0x7f800001u, 0x7fffffffu, 0xffffffffu, 0x00000001u, 0x807fffffu,
                     0x7f7fffffu, 0x477ff000u, 0x477fefffu, 0x33000000u, 0x33000001u})
    xs.push_back(float_from_bits(s));

  Failures narrow;
  for (float x : xs) {
    const uint16_t oh = float_to_half_bits(x), ch = cuda_half_bits(x);
    const uint16_t ob = float_to_bf16_bits(x), cb = cuda_bf16_bits(x);
    const bool h_ok = oh == ch || (std::isnan(half_bits_to_float(oh)) &&
                                   std::isnan(half_bits_to_float(ch)));
    const bool b_ok = ob == cb || (std::isnan(bf16_bits_to_float(ob)) &&
                                   std::isnan(bf16_bits_to_float(cb)));
    if (!h_ok) narrow.add("half " + hex(kernels::float_bits(x)) + ": " + hex(oh) + " vs " + hex(ch));
    if (!b_ok) narrow.add("bf16 " + hex(kernels::float_bits(x)) + ": " + hex(ob) + " vs " + hex(cb));
  }
  INFO(narrow.first);
  CHECK(narrow.count == 0);
}
#endif

// ---- Philox ------------------------------------------------------------------------------------

TEST_CASE("philox4x32-10 matches the published known answers", "[philox]") {
  struct Kat {
    uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    uint32_t out[4];
    kernels::philox4x32_10(k.ctr, k.key, out);
    for (int i = 0; i < 4; ++i) {
      INFO("ctr[0]=" << hex(k.ctr[0]) << " word " << i);
      CHECK(out[i] == k.out[i]);
    }
  }
}

TEST_CASE("philox_uniform follows the documented counter layout", "[philox]") {
  const uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
  for (uint64_t index : {0ull, 1ull, 3ull, 4ull, 7ull, 0x100000003ull, 0x4000000000000002ull}) {
    const uint64_t block = index / 4;
    const uint32_t key[2] = {0x89abcdefu, 0x01234567u};
    const uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                             0x76543210u, 0xfedcba98u};
    uint32_t out[4];
    kernels::philox4x32_10(ctr, key, out);
    CHECK(kernels::philox_u32(seed, stream, index) == out[index % 4]);
    CHECK(kernels::philox_uniform(seed, stream, index) == kernels::uniform_from_u32(out[index % 4]));
  }
  // Different streams and seeds give different numbers.
  CHECK(kernels::philox_u32(1, 0, 0) != kernels::philox_u32(1, 1, 0));
  CHECK(kernels::philox_u32(1, 0, 0) != kernels::philox_u32(2, 0, 0));
}

TEST_CASE("philox_uniform lies in the unit interval with mean 1/2", "[philox]") {
  CHECK(kernels::uniform_from_u32(0) == 0.0f);
  CHECK(kernels::uniform_from_u32(0xffffffffu) == 1.0f - 0x1p-24f);
  CHECK(kernels::uniform_from_u32(0x80000000u) == 0.5f);

  const int n = 1000000;
  double sum = 0;
  int out_of_range = 0;
  for (int i = 0; i < n; ++i) {
    const float u = kernels::philox_uniform(42, 7, static_cast<uint64_t>(i));
    if (!(u >= 0.0f && u < 1.0f)) ++out_of_range;
    sum += u;
  }
  CHECK(out_of_range == 0);
  // The standard error of the mean is 0.289 / 1000; 0.002 is about seven of them.
  CHECK(std::fabs(sum / n - 0.5) < 0.002);
}

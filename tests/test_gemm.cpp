// Tests of kernels::cpu::gemm against a naive double-precision triple loop: every transpose
// pair, all four element types, edge sizes, padded leading dimensions, alpha/beta cases.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "catch2/catch.hpp"
#include "kernels/cpu/gemm.h"
#include "kernels/numeric.h"

namespace {

using kernels::bfloat16;
using kernels::half;
using kernels::cpu::gemm;
using kernels::cpu::Trans;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A stored matrix of `rows` x `cols` with row stride ld = cols + pad; the padding holds NaN
// so any read outside the logical matrix shows up in the result.
template <class T>
struct Mat {
  int64_t rows, cols, ld;
  std::vector<T> v;
  Mat(int64_t r, int64_t c, int64_t pad)
      : rows(r), cols(c), ld(c + pad), v(size_t(r * (c + pad) + 1), T(kNaN)) {}
  T& at(int64_t i, int64_t j) { return v[size_t(i * ld + j)]; }
  double get(int64_t i, int64_t j) const {
    return double(static_cast<float>(v[size_t(i * ld + j)]));
  }
};
template <>
double Mat<double>::get(int64_t i, int64_t j) const {
  return v[size_t(i * ld + j)];
}

// Uniform in [-1, 1), or small dyadic values (k/16, |k| <= 8) whose products and sums are
// exact in float: then the float-accumulated result is known exactly. A xorshift generator
// and float conversions keep filling the large cases cheap.
struct Rng {
  uint64_t s;
  uint32_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 32);
  }
};
template <class T>
void fill(Mat<T>& m, Rng& rng, bool dyadic) {
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) {
      const uint32_t r = rng.next();
      const float x = dyadic ? (int(r % 17) - 8) / 16.0f : r * 0x1p-31f - 1.0f;
      m.at(i, j) = T(x);
    }
}

// Spacing of T's representable numbers at |x| (precision p bits, smallest normal 2^emin).
double ulp_of(double x, int p, int emin) {
  int e = x == 0 ? emin : std::ilogb(x);
  if (e < emin) e = emin;
  return std::ldexp(1.0, e - (p - 1));
}

template <class T>
struct Tol;
// Float and double: the standard bound for a K-term dot product plus the alpha/beta step,
// |err| <= (K + 2) u * (|alpha| sum|a||b| + |beta c|), u the unit roundoff. For K = 300
// that is ~1e-5 (float) and ~3e-14 (double) relative to the magnitude sum.
template <>
struct Tol<float> {
  static double bound(double, double mag, int64_t K) { return (K + 2) * 0x1p-24 * mag + 1e-30; }
};
template <>
struct Tol<double> {
  static double bound(double, double mag, int64_t K) { return (K + 2) * 0x1p-53 * mag + 1e-300; }
};
// half/bf16: the sum is kept in float and rounded to T once, so the result lies within one
// ulp of T of the exact value (half an ulp from the final rounding, the float error is far
// smaller). Rounding every K block, or inputs rounded twice, would break the dyadic cases,
// which are checked for exact equality separately.
template <>
struct Tol<half> {
  static double bound(double ref, double mag, int64_t K) {
    return ulp_of(ref, 11, -14) + (K + 2) * 0x1p-24 * mag;
  }
};
template <>
struct Tol<bfloat16> {
  static double bound(double ref, double mag, int64_t K) {
    return ulp_of(ref, 8, -126) + (K + 2) * 0x1p-24 * mag;
  }
};

struct Case {
  int64_t M, N, K;
};
struct Scale {
  double alpha, beta;
};

template <class T>
T round_to(double x) {
  return T(x);
}
template <>
half round_to<half>(double x) {
  return half(static_cast<float>(x));  // the exact float sum, rounded once to half
}
template <>
bfloat16 round_to<bfloat16>(double x) {
  return bfloat16(static_cast<float>(x));
}

template <class T>
double as_double(T x) {
  return double(static_cast<float>(x));
}
template <>
double as_double<double>(double x) {
  return x;
}

// Runs one gemm and compares every element of C (and checks C's padding is untouched).
template <class T>
void check(Trans ta, Trans tb, const Case& c, const Scale& s, bool dyadic, Rng& rng) {
  const int64_t M = c.M, N = c.N, K = c.K;
  // Stored shapes follow the row-major convention of gemm.h.
  Mat<T> A = ta == Trans::N ? Mat<T>(M, K, 3) : Mat<T>(K, M, 1);
  Mat<T> B = tb == Trans::N ? Mat<T>(K, N, 2) : Mat<T>(N, K, 5);
  Mat<T> C(M, N, 4);
  fill(A, rng, dyadic);
  fill(B, rng, dyadic);
  if (s.beta == 0) {
    for (auto& x : C.v) x = T(kNaN);  // beta == 0 must not read C
  } else {
    fill(C, rng, dyadic);
  }
  const Mat<T> C0 = C;
  // op(A) as M x K and op(B) as N x K in double, so the reference loop runs over rows.
  std::vector<double> a(size_t(M * K)), bt(size_t(N * K));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      a[size_t(i * K + k)] = ta == Trans::N ? A.get(i, k) : A.get(k, i);
  for (int64_t j = 0; j < N; ++j)
    for (int64_t k = 0; k < K; ++k)
      bt[size_t(j * K + k)] = tb == Trans::N ? B.get(k, j) : B.get(j, k);

  gemm<T>(ta, tb, M, N, K, s.alpha, A.v.data(), A.ld, B.v.data(), B.ld, s.beta, C.v.data(), C.ld);

  int64_t bad = 0;
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0, mag = 0;
      const double* ai = a.data() + i * K;
      const double* bj = bt.data() + j * K;
      for (int64_t k = 0; k < K; ++k) {
        sum += ai[k] * bj[k];
        mag += std::fabs(ai[k] * bj[k]);
      }
      double ref = s.alpha * sum;
      mag *= std::fabs(s.alpha);
      if (s.beta != 0) {
        ref += s.beta * C0.get(i, j);
        mag += std::fabs(s.beta * C0.get(i, j));
      }
      const double got = C.get(i, j);
      bool ok;
      if (dyadic) {
        ok = got == as_double(round_to<T>(ref));  // exact sum, one rounding: bit-exact
      } else {
        ok = std::fabs(got - ref) <= Tol<T>::bound(ref, mag, K);
      }
      if (!ok && ++bad <= 3) {
        INFO("C(" << i << "," << j << ") = " << got << ", expected " << ref);
        CHECK(ok);
      }
    }
    for (int64_t j = N; j < C.ld && i * C.ld + j < int64_t(C.v.size()); ++j)
      if (!std::isnan(C.get(i, j)) && ++bad <= 3) {
        INFO("padding of C written at (" << i << "," << j << ")");
        CHECK(false);
      }
  }
  CHECK(bad == 0);
}

// Sizes: 1 and odd sizes around the micro-tile edges; K from 0 to just past 256, 384 and
// 512 (one K pass of any plausible blocking) and beyond; a narrow im2col-like case; a
// weight-gradient-like one (small M, long K), which gemm computes as C^T like 1x130 and
// 17x65; and two with K * N large enough to split the columns into several packed-B
// blocks (2 and 4) and M small enough to split those between threads.
const Case kCases[] = {{1, 1, 1},     {1, 1, 0},      {3, 17, 0},     {3, 1, 7},
                       {17, 3, 64},   {1, 130, 65},   {130, 1, 700},  {17, 65, 257},
                       {65, 17, 3},   {65, 130, 513}, {130, 65, 385}, {1000, 10, 27},
                       {16, 27, 600}, {5, 600, 2100}, {3, 1000, 3000}};
const Scale kScales[] = {{1, 0}, {0.5, 0}, {1, 1}, {-2, 0.5}, {0, 2}, {0, 0}};

template <class T>
void run_all(bool dyadic) {
  Rng rng{0x9e3779b97f4a7c15ull};
  const Trans tr[] = {Trans::N, Trans::T};
  int n = 0;
  for (Trans ta : tr)
    for (Trans tb : tr)
      for (const Case& c : kCases) {
        // Every scale on small shapes; larger ones rotate through them to keep the test fast.
        const bool small = c.M * c.N * c.K <= 20000;
        for (size_t si = 0; si < sizeof kScales / sizeof kScales[0]; ++si) {
          if (!small && si != size_t(n) % (sizeof kScales / sizeof kScales[0])) continue;
          const Scale& s = kScales[si];
          INFO((ta == Trans::N ? "N" : "T")
               << (tb == Trans::N ? "N" : "T") << " M=" << c.M << " N=" << c.N << " K=" << c.K
               << " alpha=" << s.alpha << " beta=" << s.beta);
          check<T>(ta, tb, c, s, dyadic, rng);
        }
        ++n;
      }
}

}  // namespace

TEST_CASE("gemm float matches double reference", "[gemm]") { run_all<float>(false); }
TEST_CASE("gemm double matches double reference", "[gemm]") { run_all<double>(false); }
TEST_CASE("gemm half within one half ulp", "[gemm]") { run_all<half>(false); }
TEST_CASE("gemm bfloat16 within one bf16 ulp", "[gemm]") { run_all<bfloat16>(false); }
TEST_CASE("gemm half/bf16 round once after the whole float sum", "[gemm]") {
  // Dyadic inputs: every partial sum is exact in float, so only the final rounding is
  // allowed to lose anything and the result must be bit-exact.
  run_all<half>(true);
  run_all<bfloat16>(true);
  run_all<float>(true);
}

TEST_CASE("gemm half: K blocks are not rounded separately", "[gemm]") {
  // 1 + 2^-11 is a tie that rounds to 1 in half. With the two 2^-11 terms far apart in K
  // (in different passes of any sensible K blocking), rounding each pass would give 1;
  // one rounding of the full float sum gives 1 + 2^-10 exactly.
  const int64_t K = 5000;
  std::vector<half> A(K, half(1.0f)), B(K, half(0.0f)), C(1, half(0.0f));
  B[0] = half(1.0f);
  B[1] = half(0x1p-11f);
  B[K - 1] = half(0x1p-11f);
  gemm<half>(Trans::N, Trans::N, 1, 1, K, 1.0, A.data(), K, B.data(), 1, 0.0, C.data(), 1);
  CHECK(static_cast<float>(C[0]) == 1.0f + 0x1p-10f);
}

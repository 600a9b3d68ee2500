// The SIMD register types the CPU GEMM and the implicit-GEMM convolution are written over:
// AVX-512, AVX2+FMA, or portable 16-byte vector extensions, chosen at compile time.
#pragma once

// immintrin.h first: g++ 12 warns "(may be) used uninitialized" inside its own AVX-512
// headers (GCC PR105593), and numeric.h includes them too.
#if defined(__AVX2__) || defined(__AVX512F__) || defined(__F16C__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

#include <cstring>

namespace kernels::cpu::simd {

// ---- SIMD vectors ------------------------------------------------------------------------
// Each V gives a register type R of W lanes of V::T and the few operations the micro-kernel
// needs. Intrinsics where available: on this Zen CPU the AVX-512 kernel ran ~1.8x the AVX2
// one, and g++ 12 did not keep a plain-array version of the tile in registers (~2 GFLOP/s).

#if defined(__AVX512F__)
struct VecF {
  using T = float;
  using R = __m512;
  static constexpr int W = 16;
  static R zero() { return _mm512_setzero_ps(); }
  static R load(const T* p) { return _mm512_load_ps(p); }  // packed panels are aligned
  static R loadu(const T* p) { return _mm512_loadu_ps(p); }
  static void storeu(T* p, R v) { _mm512_storeu_ps(p, v); }
  static R set1(T x) { return _mm512_set1_ps(x); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
};
struct VecD {
  using T = double;
  using R = __m512d;
  static constexpr int W = 8;
  static R zero() { return _mm512_setzero_pd(); }
  static R load(const T* p) { return _mm512_load_pd(p); }
  static R loadu(const T* p) { return _mm512_loadu_pd(p); }
  static void storeu(T* p, R v) { _mm512_storeu_pd(p, v); }
  static R set1(T x) { return _mm512_set1_pd(x); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_pd(a, b, c); }
  static R mul(R a, R b) { return _mm512_mul_pd(a, b); }
  static R add(R a, R b) { return _mm512_add_pd(a, b); }
};
// 32 registers: MR x NV accumulators + NV rows of B; A is broadcast straight from memory.
constexpr int kWideMR = 14, kWideNV = 2, kNarrowMR = 28;
#elif defined(__AVX2__) && defined(__FMA__)
struct VecF {
  using T = float;
  using R = __m256;
  static constexpr int W = 8;
  static R zero() { return _mm256_setzero_ps(); }
  static R load(const T* p) { return _mm256_load_ps(p); }
  static R loadu(const T* p) { return _mm256_loadu_ps(p); }
  static void storeu(T* p, R v) { _mm256_storeu_ps(p, v); }
  static R set1(T x) { return _mm256_set1_ps(x); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
};
struct VecD {
  using T = double;
  using R = __m256d;
  static constexpr int W = 4;
  static R zero() { return _mm256_setzero_pd(); }
  static R load(const T* p) { return _mm256_load_pd(p); }
  static R loadu(const T* p) { return _mm256_loadu_pd(p); }
  static void storeu(T* p, R v) { _mm256_storeu_pd(p, v); }
  static R set1(T x) { return _mm256_set1_pd(x); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_pd(a, b, c); }
  static R mul(R a, R b) { return _mm256_mul_pd(a, b); }
  static R add(R a, R b) { return _mm256_add_pd(a, b); }
};
// 16 registers: 12 accumulators, 2 of B, 1 broadcast.
constexpr int kWideMR = 6, kWideNV = 2, kNarrowMR = 12;
#else
// Portable: GCC/Clang vector extensions of 16 bytes, which every SIMD target (SSE2, NEON)
// lowers to registers.
template <class S>
struct VecGeneric {
  using T = S;
  static constexpr int W = 16 / sizeof(S);
  typedef S R __attribute__((vector_size(16)));
  static R zero() { return R{}; }
  static R load(const T* p) { return loadu(p); }
  static R loadu(const T* p) {
    R r;
    std::memcpy(&r, p, sizeof r);
    return r;
  }
  static void storeu(T* p, R x) { std::memcpy(p, &x, sizeof x); }
  static R set1(T x) { return R{} + x; }
  static R fma(R a, R b, R c) { return a * b + c; }
  static R mul(R a, R b) { return a * b; }
  static R add(R a, R b) { return a + b; }
};
using VecF = VecGeneric<float>;
using VecD = VecGeneric<double>;
constexpr int kWideMR = 4, kWideNV = 2, kNarrowMR = 8;
#endif

}  // namespace kernels::cpu::simd

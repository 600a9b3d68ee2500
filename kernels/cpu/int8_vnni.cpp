// The INT8 product on AVX512-VNNI (VPDPBUSD: each int32 lane adds four u8 x s8 products):
// tiles of up to 6 rows x 64 outputs (12 x 32 or 24 x 16 for narrow layers) in 24 accumulators
// (int8_vector_tiles.h), the epilogue of int8_gemm.h in vector form. Also the 256-bit tiles of the
// AVX-VNNI path with VPDPBUSD in its EVEX encoding, so that path is tested on AVX-512 CPUs
// (int8_avx_vnni.cpp has the VEX form). This file alone is compiled for AVX512-VNNI; int8_gemm.cpp
// calls its entry points (the EVEX twin too) only on CPUs with AVX512-VNNI.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Every header before the target pragma, so no inline code shared with the rest of the engine
// is first compiled here for AVX512-VNNI (as tiles_avx512_bf16.cpp does).
#include "kernels/cpu/int8_gemm.h"
#include "kernels/error.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their "undefined" pass-through operand).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define KERNELS_AVX512_VNNI 1
#endif

namespace kernels::cpu::int8::detail {

#if defined(KERNELS_AVX512_VNNI)
namespace {

// The vector operations the tiles use, in 512-bit form (16 int32 or float lanes).
struct Zmm {
  using I = __m512i;
  using F = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16, kMaxVectors = 4;
  // 24 accumulators: rows x vectors = 24 x 1, 12 x 2, 6 x 3 or 6 x 4; with the weight vectors
  // and one broadcast, in the 32 registers.
  static constexpr int rows_for(int vectors) { return vectors == 1 ? 24 : vectors == 2 ? 12 : 6; }
  static Mask mask_of(int64_t left) { return static_cast<Mask>(left >= kLanes ? 0xffff : (1u << left) - 1); }
  static I zero() { return _mm512_setzero_si512(); }
  static I load(const int8_t* p) { return _mm512_loadu_si512(p); }
  static I broadcast(int32_t v) { return _mm512_set1_epi32(v); }
  static I dot(I acc, I a, I b) { return _mm512_dpbusd_epi32(acc, a, b); }
  static void store_sums(int32_t* p, Mask m, I v) { _mm512_mask_storeu_epi32(p, m, v); }
  static I load_ints(Mask m, const int32_t* p) { return _mm512_maskz_loadu_epi32(m, p); }
  static F load_floats(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static I load_bytes(Mask m, const uint8_t* p, bool is_signed) {
    const __m128i b = _mm_maskz_loadu_epi8(m, p);
    return is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
  }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I set_int(int32_t v) { return _mm512_set1_epi32(v); }
  static F to_float(I v) { return _mm512_cvtepi32_ps(v); }
  static F set_float(float v) { return _mm512_set1_ps(v); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F clamp(F f, float lo, float hi) { return _mm512_min_ps(_mm512_max_ps(f, set_float(lo)), set_float(hi)); }
  static I round(F f) { return _mm512_cvtps_epi32(f); }
  static void store_bytes(uint8_t* p, Mask m, I v) { _mm512_mask_cvtepi32_storeu_epi8(p, m, v); }
};

// VPDPBUSD on 256-bit vectors, EVEX-encoded (AVX512-VNNI + VL).
struct EvexDot {
  static __m256i apply(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_epi32(acc, a, b); }
};

}  // namespace
}  // namespace kernels::cpu::int8::detail

#include "kernels/cpu/int8_vector_tiles.h"

namespace kernels::cpu::int8::detail {

bool avx512_vnni_compiled() { return true; }

void gemm_rows_avx512_vnni(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                           int64_t ldo, int64_t row0) {
  gemm_rows<Zmm>(a, rows, w, ep, out, ldo, row0);
}

void gemm_rows_avx_vnni_evex(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                             int64_t ldo, int64_t row0) {
  gemm_rows<Ymm<EvexDot>>(a, rows, w, ep, out, ldo, row0);
}

void requantize_row_avx512(const int32_t* sums, int64_t j0, int64_t count, const Requant& ep, void* out_row,
                           const uint8_t* res_row) {
  requantize_row<Zmm>(sums, j0, count, ep, out_row, res_row);
}

#else

bool avx512_vnni_compiled() { return false; }
void requantize_row_avx512(const int32_t*, int64_t, int64_t, const Requant&, void*, const uint8_t*) {
  ENGINE_FAIL("the AVX512-VNNI INT8 kernels were not compiled in (GCC 10 or later builds them)");
}
void gemm_rows_avx512_vnni(const RowSource&, int64_t, const PackedWeights&, const Requant*, void*, int64_t, int64_t) {
  ENGINE_FAIL("the AVX512-VNNI INT8 kernels were not compiled in (GCC 10 or later builds them)");
}
void gemm_rows_avx_vnni_evex(const RowSource&, int64_t, const PackedWeights&, const Requant*, void*, int64_t, int64_t) {
  ENGINE_FAIL("the AVX512-VNNI INT8 kernels were not compiled in (GCC 10 or later builds them)");
}

#endif

}  // namespace kernels::cpu::int8::detail

// The INT8 product on AVX512-VNNI (VPDPBUSD: 16 lanes, each adding four u8 x s8 products to an
// int32): tiles of up to 6 rows x 64 outputs in 24 accumulators, the epilogue of int8_gemm.h in
// vector form. This file alone is compiled for AVX512-VNNI; called only after
// cpu_int8_path() found it.
#include <algorithm>
#include <cstdint>
#include <cstring>

// Every header before the target pragma, so no inline code shared with the rest of the engine
// is first compiled here for AVX512-VNNI (as tiles_avx512_bf16.cpp does).
#include "kernels/cpu/int8_gemm.h"
#include "kernels/error.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12's own AVX-512 headers trip -Wmaybe-uninitialized (their "undefined" pass-through operand).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define KERNELS_AVX512_VNNI 1
#endif

namespace kernels::cpu::int8::detail {

#if defined(KERNELS_AVX512_VNNI)
namespace {

constexpr int kMaxRows = 6, kMaxVectors = 4;  // 24 accumulators + 4 weight rows + 1 broadcast

template <int MR, int NV>
void dot_tile(const uint8_t* a, int64_t lda, const int8_t* b, int64_t k4, int64_t quad_stride,
              __m512i (&acc)[kMaxRows][kMaxVectors]) {
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_si512();
  for (int64_t q = 0; q < k4; ++q) {
    __m512i bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + q * quad_stride + v * 64);
    for (int r = 0; r < MR; ++r) {
      int32_t four;
      std::memcpy(&four, a + r * lda + 4 * q, 4);
      const __m512i av = _mm512_set1_epi32(four);
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], av, bv[v]);
    }
  }
}

// 16 outputs of one row from their sums (lanes past `mask` are not written).
void store16(__m512i sum, int64_t j, __mmask16 mask, const Requant* ep, void* out_row, const uint8_t* res_row) {
  if (!ep) {
    _mm512_mask_storeu_epi32(static_cast<int32_t*>(out_row) + j, mask, sum);
    return;
  }
  if (ep->correction) sum = _mm512_add_epi32(sum, _mm512_maskz_loadu_epi32(mask, ep->correction + j));
  __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_maskz_loadu_ps(mask, ep->multiplier + j),
                             _mm512_maskz_loadu_ps(mask, ep->offset + j));
  if (res_row) {
    const __m128i bytes = _mm_maskz_loadu_epi8(mask, res_row + j);
    const __m512i r = ep->residual_signed ? _mm512_cvtepi8_epi32(bytes) : _mm512_cvtepu8_epi32(bytes);
    const __m512 rf = _mm512_cvtepi32_ps(_mm512_sub_epi32(r, _mm512_set1_epi32(ep->residual_zero_point)));
    f = _mm512_fmadd_ps(rf, _mm512_set1_ps(ep->residual_multiplier), f);
  }
  const float qmin = ep->out_signed ? -128.f : 0.f, qmax = ep->out_signed ? 127.f : 255.f;
  const float zp = static_cast<float>(ep->zero_point);
  const float lo = ep->relu ? 0.f : qmin - zp, hi = qmax - zp;
  f = _mm512_min_ps(_mm512_max_ps(f, _mm512_set1_ps(lo)), _mm512_set1_ps(hi));
  const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), _mm512_set1_epi32(ep->zero_point));
  _mm512_mask_cvtepi32_storeu_epi8(static_cast<uint8_t*>(out_row) + j, mask, q);  // in range: truncation is exact
}

template <int MR, int NV>
void tile(const uint8_t* a, int64_t lda, const PackedWeights& w, int64_t j0, const Requant* ep, void* out,
          int64_t ldo, int64_t row0) {
  __m512i acc[kMaxRows][kMaxVectors];
  dot_tile<MR, NV>(a, lda, w.data.data() + j0 * 4, w.k4, w.n16 * 4, acc);
  const size_t elem = ep ? 1 : sizeof(int32_t);
  for (int r = 0; r < MR; ++r) {
    void* out_row = static_cast<uint8_t*>(out) + r * ldo * elem;
    const uint8_t* res_row = ep && ep->residual ? static_cast<const uint8_t*>(ep->residual) + (row0 + r) * ldo : nullptr;
    for (int v = 0; v < NV; ++v) {
      const int64_t j = j0 + 16 * v, left = w.n - j;
      const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
      store16(acc[r][v], j, mask, ep, out_row, res_row);
    }
  }
}

template <int MR>
void tile_rows(int nv, const uint8_t* a, int64_t lda, const PackedWeights& w, int64_t j0, const Requant* ep,
               void* out, int64_t ldo, int64_t row0) {
  switch (nv) {
    case 1: tile<MR, 1>(a, lda, w, j0, ep, out, ldo, row0); break;
    case 2: tile<MR, 2>(a, lda, w, j0, ep, out, ldo, row0); break;
    case 3: tile<MR, 3>(a, lda, w, j0, ep, out, ldo, row0); break;
    default: tile<MR, 4>(a, lda, w, j0, ep, out, ldo, row0); break;
  }
}

}  // namespace

bool avx512_vnni_compiled() { return true; }

void gemm_rows_avx512_vnni(const uint8_t* a, int64_t rows, int64_t lda, const PackedWeights& w, const Requant* ep,
                           void* out, int64_t ldo, int64_t row0) {
  const size_t elem = ep ? 1 : sizeof(int32_t);
  for (int64_t j0 = 0; j0 < w.n; j0 += 16 * kMaxVectors) {
    const int nv = static_cast<int>(std::min<int64_t>(kMaxVectors, (w.n - j0 + 15) / 16));
    for (int64_t r = 0; r < rows; r += kMaxRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kMaxRows, rows - r));
      const uint8_t* ar = a + r * lda;
      void* o = static_cast<uint8_t*>(out) + r * ldo * elem;
      switch (mr) {
        case 1: tile_rows<1>(nv, ar, lda, w, j0, ep, o, ldo, row0 + r); break;
        case 2: tile_rows<2>(nv, ar, lda, w, j0, ep, o, ldo, row0 + r); break;
        case 3: tile_rows<3>(nv, ar, lda, w, j0, ep, o, ldo, row0 + r); break;
        case 4: tile_rows<4>(nv, ar, lda, w, j0, ep, o, ldo, row0 + r); break;
        case 5: tile_rows<5>(nv, ar, lda, w, j0, ep, o, ldo, row0 + r); break;
        default: tile_rows<6>(nv, ar, lda, w, j0, ep, o, ldo, row0 + r); break;
      }
    }
  }
}

#else

bool avx512_vnni_compiled() { return false; }
void gemm_rows_avx512_vnni(const uint8_t*, int64_t, int64_t, const PackedWeights&, const Requant*, void*, int64_t,
                           int64_t) {
  ENGINE_FAIL("the AVX512-VNNI INT8 kernels were not compiled in (GCC 10 or later builds them)");
}

#endif

}  // namespace kernels::cpu::int8::detail

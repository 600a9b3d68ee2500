// The INT8 product on AVX512-VNNI (VPDPBUSD: each int32 lane adds four u8 x s8 products):
// tiles of up to 6 rows x 64 outputs (12 x 32 or 24 x 16 for narrow layers) in 24 accumulators, the
// epilogue of int8_gemm.h in vector form. This file alone is compiled for AVX512-VNNI; called only after
// cpu_int8_path() found it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

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

// The vector operations the tile uses, in 512-bit form (16 int32 or float lanes).
struct Zmm {
  using I = __m512i;
  using F = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16;
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

// Tiles of up to 6 rows x 4 vectors (64 outputs), 12 rows x 2 vectors or 24 rows x 1 for
// narrow layers: 24 accumulators, the weight vectors and one broadcast in the 32 registers.
constexpr int kMaxRows = 24, kMaxVectors = 4;

// The loops over rows and vectors are unrolled (compile-time bounds) so the accumulators stay
// in registers; left rolled, GCC keeps the array in memory and stores it every step.
template <class V, int MR, int NV>
void dot_tile(const RowSource& a, const int8_t* b, int64_t k4, int64_t quad_stride,
              typename V::I (&acc)[kMaxRows][kMaxVectors]) {
#pragma GCC unroll 24
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V::zero();
  const uint8_t* row[MR];
#pragma GCC unroll 24
  for (int r = 0; r < MR; ++r) row[r] = a.row[r];
  const int64_t segments = k4 / a.segment_quads;
  for (int64_t seg = 0; seg < segments; ++seg) {
    const int8_t* bs = b + seg * a.segment_quads * quad_stride;
    const int64_t offset = seg * a.segment_stride;
    for (int64_t q = 0; q < a.segment_quads; ++q) {
      typename V::I bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = V::load(bs + q * quad_stride + v * 4 * V::kLanes);
#pragma GCC unroll 24
      for (int r = 0; r < MR; ++r) {
        int32_t four;
        std::memcpy(&four, row[r] + offset + 4 * q, 4);
        const typename V::I av = V::broadcast(four);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = V::dot(acc[r][v], av, bv[v]);
      }
    }
  }
}

// The epilogue of int8_gemm.h in vector form, operation for operation. Its per-channel terms
// (one vector of outputs) and its scalars are loaded once per tile, not per row: read through
// `ep` after each row's byte store, the compiler must reload them, as a byte store may alias.
template <class V>
struct LaneTerms {
  typename V::I correction;
  typename V::F multiplier, offset;
  typename V::Mask mask;  // lanes past it are neither read nor written
};
template <class V>
LaneTerms<V> lane_terms(const Requant& ep, int64_t j, typename V::Mask mask) {
  return {ep.correction ? V::load_ints(mask, ep.correction + j) : V::zero(), V::load_floats(mask, ep.multiplier + j),
          V::load_floats(mask, ep.offset + j), mask};
}
template <class V>
struct EpilogueScalars {
  float lo, hi, residual_multiplier;
  int32_t zero_point, residual_zero_point;
  bool residual_signed;
  explicit EpilogueScalars(const Requant& ep)
      : residual_multiplier(ep.residual_multiplier), zero_point(ep.zero_point),
        residual_zero_point(ep.residual_zero_point), residual_signed(ep.residual_signed) {
    const float qmin = ep.out_signed ? -128.f : 0.f, qmax = ep.out_signed ? 127.f : 255.f;
    const float zp = static_cast<float>(ep.zero_point);
    lo = ep.relu ? 0.f : qmin - zp;
    hi = qmax - zp;
  }
};
// kLanes outputs of one row from their sums; res_row: the residual's row, or nullptr.
template <class V>
__attribute__((always_inline)) inline void requantize_lanes(typename V::I sum, const LaneTerms<V>& t,
                                                            const EpilogueScalars<V>& e, uint8_t* out,
                                                            const uint8_t* res) {
  typename V::F f = V::fma(V::to_float(V::add(sum, t.correction)), t.multiplier, t.offset);
  if (res) {
    const typename V::I r = V::load_bytes(t.mask, res, e.residual_signed);
    f = V::fma(V::to_float(V::sub(r, V::set_int(e.residual_zero_point))), V::set_float(e.residual_multiplier), f);
  }
  f = V::clamp(f, e.lo, e.hi);
  V::store_bytes(out, t.mask, V::add(V::round(f), V::set_int(e.zero_point)));
}

template <class V, int MR, int NV>
void tile(const RowSource& a, const PackedWeights& w, int64_t j0, const Requant* ep, void* out, int64_t ldo,
          int64_t row0) {
  typename V::I acc[kMaxRows][kMaxVectors];
  dot_tile<V, MR, NV>(a, w.data.data() + j0 * 4, w.k4, w.n_padded * 4, acc);
  typename V::Mask mask[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const int64_t left = w.n - (j0 + V::kLanes * v);
    mask[v] = static_cast<typename V::Mask>(left >= V::kLanes ? (1u << V::kLanes) - 1 : (1u << left) - 1);
  }
  if (!ep) {  // the sums themselves, int32
#pragma GCC unroll 24
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) V::store_sums(static_cast<int32_t*>(out) + r * ldo + j0 + V::kLanes * v, mask[v], acc[r][v]);
    return;
  }
  LaneTerms<V> terms[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) terms[v] = lane_terms<V>(*ep, j0 + V::kLanes * v, mask[v]);
  const EpilogueScalars<V> scalars(*ep);
  const uint8_t* residual = static_cast<const uint8_t*>(ep->residual);
#pragma GCC unroll 24
  for (int r = 0; r < MR; ++r) {
    uint8_t* out_row = static_cast<uint8_t*>(out) + r * ldo + j0;
    const uint8_t* res_row = residual ? residual + (row0 + r) * ldo + j0 : nullptr;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v)
      requantize_lanes<V>(acc[r][v], terms[v], scalars, out_row + V::kLanes * v,
                          res_row ? res_row + V::kLanes * v : nullptr);
  }
}

// Calls f with std::integral_constant<int, mr> for 1 <= mr <= MR: the tile's rows as a
// compile-time count, so its loops unroll.
template <int MR, class F>
void with_rows(int mr, F&& f) {
  if constexpr (MR > 1)
    if (mr < MR) return with_rows<MR - 1>(mr, f);
  f(std::integral_constant<int, MR>{});
}

template <class V>
void gemm_rows(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out, int64_t ldo,
               int64_t row0) {
  const size_t elem = ep ? 1 : sizeof(int32_t);
  constexpr int64_t kBlock = V::kLanes * kMaxVectors;
  for (int64_t j0 = 0; j0 < w.n; j0 += kBlock) {
    const int nv = static_cast<int>(std::min<int64_t>(kMaxVectors, (w.n - j0 + V::kLanes - 1) / V::kLanes));
    // 24 accumulators: rows x vectors = 24 x 1, 12 x 2, 6 x 3 or 6 x 4.
    const int64_t tile_rows = nv == 1 ? 24 : nv == 2 ? 12 : 6;
    for (int64_t r = 0; r < rows; r += tile_rows) {
      const int mr = static_cast<int>(std::min<int64_t>(tile_rows, rows - r));
      RowSource at = a;
      at.row = a.row + r;
      void* o = static_cast<uint8_t*>(out) + r * ldo * elem;
      auto run = [&](auto rows_c, auto vectors_c) {
        tile<V, decltype(rows_c)::value, decltype(vectors_c)::value>(at, w, j0, ep, o, ldo, row0 + r);
      };
      using std::integral_constant;
      switch (nv) {
        case 1: with_rows<24>(mr, [&](auto m) { run(m, integral_constant<int, 1>{}); }); break;
        case 2: with_rows<12>(mr, [&](auto m) { run(m, integral_constant<int, 2>{}); }); break;
        case 3: with_rows<6>(mr, [&](auto m) { run(m, integral_constant<int, 3>{}); }); break;
        default: with_rows<6>(mr, [&](auto m) { run(m, integral_constant<int, 4>{}); }); break;
      }
    }
  }
}

}  // namespace

bool avx512_vnni_compiled() { return true; }

void gemm_rows_avx512_vnni(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                           int64_t ldo, int64_t row0) {
  gemm_rows<Zmm>(a, rows, w, ep, out, ldo, row0);
}

void requantize_row_avx512(const int32_t* sums, int64_t j0, int64_t count, const Requant& ep, void* out_row,
                           const uint8_t* res_row) {
  const EpilogueScalars<Zmm> scalars(ep);
  for (int64_t c = 0; c < count; c += 16) {
    const int64_t left = count - c;
    const __mmask16 mask = left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1);
    requantize_lanes<Zmm>(_mm512_maskz_loadu_epi32(mask, sums + c), lane_terms<Zmm>(ep, j0 + c, mask), scalars,
                          static_cast<uint8_t*>(out_row) + j0 + c, res_row ? res_row + j0 + c : nullptr);
  }
}

#else

bool avx512_vnni_compiled() { return false; }
void requantize_row_avx512(const int32_t*, int64_t, int64_t, const Requant&, void*, const uint8_t*) {
  ENGINE_FAIL("the AVX512-VNNI INT8 kernels were not compiled in (GCC 10 or later builds them)");
}
void gemm_rows_avx512_vnni(const RowSource&, int64_t, const PackedWeights&, const Requant*, void*, int64_t, int64_t) {
  ENGINE_FAIL("the AVX512-VNNI INT8 kernels were not compiled in (GCC 10 or later builds them)");
}

#endif

}  // namespace kernels::cpu::int8::detail

// The INT8 product's vector tiles, for any vector width V (int8_vnni.cpp: 512-bit; the 256-bit
// form in int8_vnni.cpp and int8_avx_vnni.cpp): a tile of rows x vectors of outputs summed by
// VPDPBUSD in registers, then the epilogue of int8_gemm.h. Included only by those files, after
// their target pragma, so each compiles its own copy for its instruction set.
//
// V provides: I, F, Mask, kLanes (int32 lanes), kMaxVectors, rows_for(vectors) (the tile's rows:
// the accumulators, weights and a broadcast must fit the registers), mask_of(outputs left),
// and the operations used below.
#pragma once

namespace kernels::cpu::int8::detail {
namespace {

constexpr int kMaxTileRows = 24, kMaxTileVectors = 4;

// The loops over rows and vectors are unrolled (compile-time bounds) so the accumulators stay
// in registers; left rolled, GCC keeps the array in memory and stores it every step.
template <class V, int MR, int NV>
void dot_tile(const RowSource& a, const int8_t* b, int64_t k4, int64_t quad_stride,
              typename V::I (&acc)[kMaxTileRows][kMaxTileVectors]) {
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
// kLanes outputs of one row from their sums; res: the residual's row at the same outputs, or nullptr.
template <class V>
__attribute__((always_inline)) inline void requantize_lanes(typename V::I sum, const LaneTerms<V>& t,
                                                            const EpilogueScalars& e, uint8_t* out,
                                                            const uint8_t* res) {
  typename V::F f = V::fma(V::to_float(V::add(sum, t.correction)), t.multiplier, t.offset);
  if (res) {
    const typename V::I r = V::load_bytes(t.mask, res, e.residual_signed);
    f = V::fma(V::to_float(V::sub(r, V::set_int(e.residual_zero_point))), V::set_float(e.residual_multiplier), f);
  }
  f = V::clamp(f, e.lo, e.hi);
  V::store_bytes(out, t.mask, V::add(V::round(f), V::set_int(e.zero_point)));
}

// The epilogue on `count` consecutive outputs from their int32 sums (the tile paths' store).
template <class V>
void requantize_row(const int32_t* sums, int64_t j0, int64_t count, const Requant& ep, void* out_row,
                    const uint8_t* res_row) {
  const EpilogueScalars scalars(ep);
  for (int64_t c = 0; c < count; c += V::kLanes) {
    const typename V::Mask mask = V::mask_of(count - c);
    requantize_lanes<V>(V::load_ints(mask, sums + c), lane_terms<V>(ep, j0 + c, mask), scalars,
                        static_cast<uint8_t*>(out_row) + j0 + c, res_row ? res_row + j0 + c : nullptr);
  }
}

template <class V, int MR, int NV>
void tile(const RowSource& a, const PackedWeights& w, int64_t j0, const Requant* ep, void* out, int64_t ldo,
          int64_t row0) {
  typename V::I acc[kMaxTileRows][kMaxTileVectors];
  dot_tile<V, MR, NV>(a, w.data.data() + j0 * 4, w.k4, w.n_padded * 4, acc);
  typename V::Mask mask[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) mask[v] = V::mask_of(w.n - (j0 + V::kLanes * v));
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
  const EpilogueScalars scalars(*ep);
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

// The tiles of `rows` rows x NV vectors at output column j0.
template <class V, int NV>
void tile_rows(const RowSource& a, int64_t rows, const PackedWeights& w, int64_t j0, const Requant* ep, void* out,
               int64_t ldo, int64_t row0) {
  constexpr int kRows = V::rows_for(NV);
  const size_t elem = ep ? 1 : sizeof(int32_t);
  for (int64_t r = 0; r < rows; r += kRows) {
    RowSource at = a;
    at.row = a.row + r;
    void* o = static_cast<uint8_t*>(out) + r * ldo * elem;
    with_rows<kRows>(static_cast<int>(std::min<int64_t>(kRows, rows - r)), [&](auto m) {
      tile<V, decltype(m)::value, NV>(at, w, j0, ep, o, ldo, row0 + r);
    });
  }
}

template <class V>
void gemm_rows(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out, int64_t ldo,
               int64_t row0) {
  static_assert(V::kMaxVectors <= kMaxTileVectors && V::rows_for(1) <= kMaxTileRows);
  constexpr int64_t kBlock = V::kLanes * V::kMaxVectors;
  for (int64_t j0 = 0; j0 < w.n; j0 += kBlock) {
    const int nv = static_cast<int>(std::min<int64_t>(V::kMaxVectors, (w.n - j0 + V::kLanes - 1) / V::kLanes));
    if (nv == 1) tile_rows<V, 1>(a, rows, w, j0, ep, out, ldo, row0);
    if constexpr (V::kMaxVectors >= 2)
      if (nv == 2) tile_rows<V, 2>(a, rows, w, j0, ep, out, ldo, row0);
    if constexpr (V::kMaxVectors >= 3)
      if (nv == 3) tile_rows<V, 3>(a, rows, w, j0, ep, out, ldo, row0);
    if constexpr (V::kMaxVectors >= 4)
      if (nv == 4) tile_rows<V, 4>(a, rows, w, j0, ep, out, ldo, row0);
  }
}

// 256-bit vectors with AVX2 operations only (AVX-VNNI CPUs may lack AVX-512: no mask
// registers, so tails go through lane counts and masked moves); Dot::apply is VPDPBUSD in
// the VEX (AVX-VNNI) or the EVEX (AVX512-VNNI + VL) encoding: the same operation.
template <class Dot>
struct Ymm {
  using I = __m256i;
  using F = __m256;
  using Mask = int;  // the lanes in use, 1..8
  static constexpr int kLanes = 8, kMaxVectors = 2;
  // 16 registers: 12 accumulators, the weight vectors and one broadcast.
  static constexpr int rows_for(int vectors) { return vectors == 1 ? 12 : 6; }
  static Mask mask_of(int64_t left) { return left >= kLanes ? kLanes : static_cast<int>(left); }
  static I lanes(Mask m) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }
  static I zero() { return _mm256_setzero_si256(); }
  static I load(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I broadcast(int32_t v) { return _mm256_set1_epi32(v); }
  static I dot(I acc, I a, I b) { return Dot::apply(acc, a, b); }
  static void store_sums(int32_t* p, Mask m, I v) {
    if (m == kLanes)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    else
      _mm256_maskstore_epi32(p, lanes(m), v);
  }
  static I load_ints(Mask m, const int32_t* p) {
    return m == kLanes ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)) : _mm256_maskload_epi32(p, lanes(m));
  }
  static F load_floats(Mask m, const float* p) {
    return m == kLanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes(m));
  }
  static I load_bytes(Mask m, const uint8_t* p, bool is_signed) {
    int64_t eight = 0;
    if (m == kLanes)
      std::memcpy(&eight, p, 8);
    else
      std::memcpy(&eight, p, static_cast<size_t>(m));
    const __m128i b = _mm_cvtsi64_si128(eight);
    return is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
  }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I set_int(int32_t v) { return _mm256_set1_epi32(v); }
  static F to_float(I v) { return _mm256_cvtepi32_ps(v); }
  static F set_float(float v) { return _mm256_set1_ps(v); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // max then min, as the 512-bit form: a NaN goes to the low end.
  static F clamp(F f, float lo, float hi) { return _mm256_min_ps(_mm256_max_ps(f, set_float(lo)), set_float(hi)); }
  static I round(F f) { return _mm256_cvtps_epi32(f); }
  // The low byte of each lane (the values fit a byte by now), as VPMOVDB writes them.
  static void store_bytes(uint8_t* p, Mask m, I v) {
    const __m256i low = _mm256_shuffle_epi8(
        v, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1,
                            -1, -1, -1, -1, -1, -1, -1, -1));
    const __m128i both = _mm_unpacklo_epi32(_mm256_castsi256_si128(low), _mm256_extracti128_si256(low, 1));
    const int64_t eight = _mm_cvtsi128_si64(both);
    if (m == kLanes)
      std::memcpy(p, &eight, 8);
    else
      std::memcpy(p, &eight, static_cast<size_t>(m));
  }
};

}  // namespace
}  // namespace kernels::cpu::int8::detail

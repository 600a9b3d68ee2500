// The INT8 product on AVX-VNNI: VPDPBUSD in its 256-bit VEX form, for CPUs with AVX2 and
// AVX-VNNI but no AVX-512 (client cores, E-core Xeons). The tiles are int8_vector_tiles.h's Ymm,
// the same code int8_vnni.cpp runs with the EVEX encoding (tested there on AVX512-VNNI CPUs);
// only the instruction's encoding is this file's own. Called only after cpu_int8_path() found
// AVX-VNNI.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Every header before the target pragma (as int8_vnni.cpp).
#include "kernels/cpu/int8_gemm.h"
#include "kernels/error.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC target("avx2,fma,avxvnni")
#include <immintrin.h>
#define KERNELS_AVX_VNNI 1
#endif

namespace kernels::cpu::int8::detail {

#if defined(KERNELS_AVX_VNNI)
namespace {
// VPDPBUSD on 256-bit vectors, VEX-encoded (AVX-VNNI).
struct VexDot {
  static __m256i apply(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_avx_epi32(acc, a, b); }
};
}  // namespace
}  // namespace kernels::cpu::int8::detail

#include "kernels/cpu/int8_vector_tiles.h"

namespace kernels::cpu::int8::detail {

bool avx_vnni_compiled() { return true; }

void gemm_rows_avx_vnni(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                        int64_t ldo, int64_t row0) {
  gemm_rows<Ymm<VexDot>>(a, rows, w, ep, out, ldo, row0);
}

#else

bool avx_vnni_compiled() { return false; }
void gemm_rows_avx_vnni(const RowSource&, int64_t, const PackedWeights&, const Requant*, void*, int64_t, int64_t) {
  ENGINE_FAIL("the AVX-VNNI INT8 kernels were not compiled in (GCC 11 or later builds them)");
}

#endif

}  // namespace kernels::cpu::int8::detail

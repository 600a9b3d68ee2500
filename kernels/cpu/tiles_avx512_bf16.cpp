// The tile drivers (conv_tiles.h, gemm_tiles.h) on Avx512Bf16Tiles: this file alone is compiled
// for AVX512-BF16, so the rest of the engine runs on CPUs without it. Called only after
// cpu_isa() found AVX512-BF16 (bf16_tile_unit).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// Every header the drivers need before the target pragma, so no inline function shared with the
// rest of the engine is first compiled here, for AVX512-BF16 (as gemm_amx_hw.cpp does for AMX).
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/threads.h"
#include "kernels/error.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
#include "kernels/cpu/avx512_bf16_tiles.h"
#include "kernels/cpu/conv_tiles.h"
#include "kernels/cpu/gemm_tiles.h"
#define KERNELS_AVX512_BF16_TILES 1
#endif

namespace kernels::cpu {

bool avx512_bf16_kernels_built() {
#if defined(KERNELS_AVX512_BF16_TILES)
  return true;
#else
  return false;
#endif
}

namespace tiles_avx512_bf16 {

static void check_in_use() {
  ENGINE_CHECK(static_cast<int>(cpu_isa()) >= static_cast<int>(CpuIsa::Avx512Bf16) && avx512_bf16_kernels_built(),
               "the AVX512-BF16 tile kernels called where the ISA in use is " << cpu_isa_name(cpu_isa())
                                                                              << (avx512_bf16_kernels_built() ? "" : " (and this build has none)"));
}

#if defined(KERNELS_AVX512_BF16_TILES)
using Tiles = amx::Avx512Bf16Tiles;
double peak_gflops(double seconds) {
  check_in_use();
  return amx::resident_tile_gflops<Tiles>(seconds);
}
void round_row(const float* sum, const float* bias, bfloat16* out, int64_t n, bool relu) {
  check_in_use();
  Tiles::round_row(sum, bias, out, n, relu);
}
void transpose32(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
  check_in_use();
  Tiles::transpose32(src, src_stride, dst, dst_stride);
}
void conv_forward(TileRoute route, const ConvShape& sh, const bfloat16* x, const bfloat16* w, const bfloat16* bias,
                  bfloat16* y, bool relu) {
  check_in_use();
  amx::tile_conv2d_forward<Tiles>(route, sh, x, w, bias, y, relu);
}
void conv_backward_data(TileRoute route, const ConvShape& sh, const bfloat16* gy, const bfloat16* w, bfloat16* gx) {
  check_in_use();
  amx::tile_conv2d_backward_data<Tiles>(route, sh, gy, w, gx);
}
void conv_backward_filter(TileRoute route, const ConvShape& sh, const bfloat16* x, const bfloat16* gy, bfloat16* gw,
                          bfloat16* gbias) {
  check_in_use();
  amx::tile_conv2d_backward_filter<Tiles>(route, sh, x, gy, gw, gbias);
}
template <class Out>
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const bfloat16* A, int64_t lda,
          const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc) {
  check_in_use();
  amx::tile_gemm<Tiles, Out>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#else
double peak_gflops(double) { check_in_use(); return 0; }
void round_row(const float*, const float*, bfloat16*, int64_t, bool) { check_in_use(); }
void transpose32(const uint16_t*, int64_t, uint16_t*, int64_t) { check_in_use(); }
void conv_forward(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, const bfloat16*, bfloat16*, bool) {
  check_in_use();
}
void conv_backward_data(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*) { check_in_use(); }
void conv_backward_filter(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*, bfloat16*) { check_in_use(); }
template <class Out>
void gemm(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*, int64_t, const bfloat16*, int64_t, double,
          Out*, int64_t) {
  check_in_use();
}
#endif
template void gemm<float>(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*, int64_t, const bfloat16*,
                          int64_t, double, float*, int64_t);
template void gemm<bfloat16>(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*, int64_t,
                             const bfloat16*, int64_t, double, bfloat16*, int64_t);

}  // namespace tiles_avx512_bf16
}  // namespace kernels::cpu

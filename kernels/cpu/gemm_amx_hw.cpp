// The hardware instantiations of the tile GEMM (gemm_amx.h) and the tile convolution
// (bf16_tiles.h): this file alone is compiled with the AMX target, so the rest of the engine
// runs on CPUs without it. Called only after cpu_isa() found AMX and Linux granted the tile
// data permission.
#include "kernels/cpu/gemm_amx.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

// Every header gemm_tiles.h needs before the target pragma, so no inline function shared with
// the rest of the engine is first compiled here, for AMX.
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/threads.h"
#include "kernels/error.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

// GCC 11 or later (clang ignores this pragma; it would need per-function target attributes).
// The driver's template is defined after the pragma, so its instantiation on HardwareTiles is
// compiled for AMX and the tile instructions inline into it; it stays on to the end of the file.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#pragma GCC target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")
#include "kernels/cpu/amx_hw_tiles.h"
#include "kernels/cpu/conv_tiles.h"
#include "kernels/cpu/gemm_tiles.h"
#define KERNELS_AMX_HARDWARE 1
#endif

namespace kernels::cpu {

bool amx_kernels_built() {
#if defined(KERNELS_AMX_HARDWARE)
  return true;
#else
  return false;
#endif
}

template <class Out>
void gemm_bf16_tiles_amx(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const bfloat16* A,
                         int64_t lda, const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc) {
  ENGINE_CHECK(cpu_isa() == CpuIsa::Amx, "the AMX GEMM called where the ISA in use is " << cpu_isa_name(cpu_isa()));
#if defined(KERNELS_AMX_HARDWARE)
  amx::tile_gemm<amx::HardwareTiles, Out>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#else
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta,
      (void)C, (void)ldc;
  ENGINE_FAIL("this build has no AMX kernels (an x86-64 compiler with AMX intrinsics is needed)");
#endif
}

template void gemm_bf16_tiles_amx<float>(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*, int64_t,
                                         const bfloat16*, int64_t, double, float*, int64_t);
template void gemm_bf16_tiles_amx<bfloat16>(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*,
                                            int64_t, const bfloat16*, int64_t, double, bfloat16*, int64_t);

namespace tiles_amx {

static void check_in_use() {
  ENGINE_CHECK(cpu_isa() == CpuIsa::Amx && amx_kernels_built(),
               "the AMX convolution called where the ISA in use is " << cpu_isa_name(cpu_isa()));
}
#if defined(KERNELS_AMX_HARDWARE)
double peak_gflops(double seconds) {
  check_in_use();
  return amx::resident_tile_gflops<amx::HardwareTiles>(seconds);
}
void round_row(const float* sum, const float* bias, bfloat16* out, int64_t n, bool relu) {
  check_in_use();
  amx::HardwareTiles::round_row(sum, bias, out, n, relu);
}
void transpose32(const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
  check_in_use();
  amx::HardwareTiles::transpose32(src, src_stride, dst, dst_stride);
}
void conv_forward(TileRoute route, const ConvShape& sh, const bfloat16* x, const bfloat16* w, const bfloat16* bias,
                  bfloat16* y, bool relu) {
  check_in_use();
  amx::tile_conv2d_forward<amx::HardwareTiles>(route, sh, x, w, bias, y, relu);
}
void conv_backward_data(TileRoute route, const ConvShape& sh, const bfloat16* gy, const bfloat16* w, bfloat16* gx) {
  check_in_use();
  amx::tile_conv2d_backward_data<amx::HardwareTiles>(route, sh, gy, w, gx);
}
void conv_backward_filter(TileRoute route, const ConvShape& sh, const bfloat16* x, const bfloat16* gy, bfloat16* gw,
                          bfloat16* gbias) {
  check_in_use();
  amx::tile_conv2d_backward_filter<amx::HardwareTiles>(route, sh, x, gy, gw, gbias);
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
#endif

}  // namespace tiles_amx
}  // namespace kernels::cpu

// The tile unit in use, the emulated instantiation of the tile convolution, and the dispatch of
// bf16_tiles.h's entries to the unit asked for.
#include "kernels/cpu/bf16_tiles.h"

#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/conv_tiles.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/error.h"

namespace kernels::cpu {

const char* tile_unit_name(TileUnit unit) {
  switch (unit) {
    case TileUnit::Emulated: return "emulated AMX";
    case TileUnit::Avx512Bf16: return "AVX512-BF16";
    case TileUnit::Amx: return "AMX";
  }
  return "?";
}

bool bf16_tile_unit(TileUnit* unit) {
  const CpuIsa isa = cpu_isa();
  if (isa == CpuIsa::Amx && amx_kernels_built()) return *unit = TileUnit::Amx, true;
  if (static_cast<int>(isa) >= static_cast<int>(CpuIsa::Avx512Bf16) && avx512_bf16_kernels_built())
    return *unit = TileUnit::Avx512Bf16, true;
  return false;
}

const char* tile_route_name(TileRoute route) {
  switch (route) {
    case TileRoute::Auto: return "auto";
    case TileRoute::Flat: return "flat";
    case TileRoute::Columns: return "columns";
  }
  return "?";
}
bool tile_conv_worth_it(const ConvShape& sh) { return sh.groups == 1 && sh.c >= 16; }

TileRoute tile_forward_route(const ConvShape& sh) {
  return amx::flat_route_fits(sh) ? TileRoute::Flat : TileRoute::Columns;
}
TileRoute tile_backward_data_route(const ConvShape& sh) {
  return amx::flat_backward_data_fits(sh) ? TileRoute::Flat : TileRoute::Columns;
}
TileRoute tile_backward_filter_route(const ConvShape& sh) { return tile_forward_route(sh); }

void conv2d_forward_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* x, const bfloat16* w,
                               const bfloat16* bias, bfloat16* y, TileRoute route, bool relu) {
  ENGINE_CHECK(sh.groups == 1, "the tile convolution takes one group");
  switch (unit) {
    case TileUnit::Emulated: return amx::tile_conv2d_forward<amx::EmulatedTiles>(route, sh, x, w, bias, y, relu);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::conv_forward(route, sh, x, w, bias, y, relu);
    case TileUnit::Amx: return tiles_amx::conv_forward(route, sh, x, w, bias, y, relu);
  }
}

void conv2d_backward_data_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* gy, const bfloat16* w,
                                     bfloat16* gx, TileRoute route) {
  ENGINE_CHECK(sh.groups == 1, "the tile convolution takes one group");
  switch (unit) {
    case TileUnit::Emulated: return amx::tile_conv2d_backward_data<amx::EmulatedTiles>(route, sh, gy, w, gx);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::conv_backward_data(route, sh, gy, w, gx);
    case TileUnit::Amx: return tiles_amx::conv_backward_data(route, sh, gy, w, gx);
  }
}

void conv2d_backward_filter_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* x, const bfloat16* gy,
                                       bfloat16* gw, bfloat16* gbias, TileRoute route) {
  ENGINE_CHECK(sh.groups == 1, "the tile convolution takes one group");
  switch (unit) {
    case TileUnit::Emulated:
      return amx::tile_conv2d_backward_filter<amx::EmulatedTiles>(route, sh, x, gy, gw, gbias);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::conv_backward_filter(route, sh, x, gy, gw, gbias);
    case TileUnit::Amx: return tiles_amx::conv_backward_filter(route, sh, x, gy, gw, gbias);
  }
}

double tile_peak_gflops(TileUnit unit, double seconds) {
  switch (unit) {
    case TileUnit::Emulated: return amx::resident_tile_gflops<amx::EmulatedTiles>(seconds);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::peak_gflops(seconds);
    case TileUnit::Amx: return tiles_amx::peak_gflops(seconds);
  }
  return 0;
}

void tile_round_row(TileUnit unit, const float* sum, const float* bias, bfloat16* out, int64_t n, bool relu) {
  ENGINE_CHECK(n >= 0 && n <= 32, "tile_round_row takes 0 to 32 values, not " << n);
  switch (unit) {
    case TileUnit::Emulated: return amx::EmulatedTiles::round_row(sum, bias, out, n, relu);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::round_row(sum, bias, out, n, relu);
    case TileUnit::Amx: return tiles_amx::round_row(sum, bias, out, n, relu);
  }
}
void tile_transpose32(TileUnit unit, const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
  switch (unit) {
    case TileUnit::Emulated: return amx::EmulatedTiles::transpose32(src, src_stride, dst, dst_stride);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::transpose32(src, src_stride, dst, dst_stride);
    case TileUnit::Amx: return tiles_amx::transpose32(src, src_stride, dst, dst_stride);
  }
}

template <class Out>
void gemm_bf16_tiles(TileUnit unit, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha,
                     const bfloat16* A, int64_t lda, const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc) {
  switch (unit) {
    case TileUnit::Emulated: return gemm_bf16_tiles_emulated<Out>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    case TileUnit::Avx512Bf16:
      return tiles_avx512_bf16::gemm<Out>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    case TileUnit::Amx: return gemm_bf16_tiles_amx<Out>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}
template void gemm_bf16_tiles<float>(TileUnit, Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*,
                                     int64_t, const bfloat16*, int64_t, double, float*, int64_t);
template void gemm_bf16_tiles<bfloat16>(TileUnit, Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*,
                                        int64_t, const bfloat16*, int64_t, double, bfloat16*, int64_t);

}  // namespace kernels::cpu

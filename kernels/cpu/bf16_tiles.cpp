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

// Padding c to 32 costs round_up32(c) / c of the work: allowed up to 1.5x (c >= 22, or 48 ...).
static bool pads_well(int64_t c) { return 2 * amx::round_up32(c) <= 3 * c; }
// The flat layout computes qp pixels per image for out_h * out_w real ones (conv_tiles.h): at
// stride 2, or on 4 x 4 images, half the work is thrown away, and the widened FP32 kernels were
// measured faster there (bench_cpu_conv). At least 60% real: 8 x 8 images and up at stride 1.
static bool little_waste(const ConvShape& sh) {
  const amx::TileConvGeometry g = amx::tile_conv_geometry(sh);
  return 10 * sh.out_h() * sh.out_w() >= 6 * g.qp;
}
bool tile_forward_fits(const ConvShape& sh) {
  return sh.groups == 1 && pads_well(sh.c) && pads_well(sh.k) && little_waste(sh);
}
bool tile_backward_data_fits_engine(const ConvShape& sh) {
  return amx::tile_backward_data_fits(sh) && pads_well(sh.c) && pads_well(sh.k) &&
         little_waste(amx::backward_data_as_forward(sh));
}
bool tile_backward_filter_fits(const ConvShape& sh) { return tile_forward_fits(sh); }

void conv2d_forward_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* x, const bfloat16* w,
                               const bfloat16* bias, bfloat16* y) {
  ENGINE_CHECK(sh.groups == 1, "the tile convolution takes one group");
  switch (unit) {
    case TileUnit::Emulated: return amx::tile_conv_forward<amx::EmulatedTiles>(sh, x, w, bias, y);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::conv_forward(sh, x, w, bias, y);
    case TileUnit::Amx: return tiles_amx::conv_forward(sh, x, w, bias, y);
  }
}

void conv2d_backward_data_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* gy, const bfloat16* w,
                                     bfloat16* gx) {
  ENGINE_CHECK(amx::tile_backward_data_fits(sh),
               "the tile data gradient takes one group, stride 1, square filters and pad <= r - 1");
  switch (unit) {
    case TileUnit::Emulated: return amx::tile_conv_backward_data<amx::EmulatedTiles>(sh, gy, w, gx);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::conv_backward_data(sh, gy, w, gx);
    case TileUnit::Amx: return tiles_amx::conv_backward_data(sh, gy, w, gx);
  }
}

void conv2d_backward_filter_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* x, const bfloat16* gy,
                                       bfloat16* gw, bfloat16* gbias) {
  ENGINE_CHECK(sh.groups == 1, "the tile convolution takes one group");
  switch (unit) {
    case TileUnit::Emulated: return amx::tile_conv_backward_filter<amx::EmulatedTiles>(sh, x, gy, gw, gbias);
    case TileUnit::Avx512Bf16: return tiles_avx512_bf16::conv_backward_filter(sh, x, gy, gw, gbias);
    case TileUnit::Amx: return tiles_amx::conv_backward_filter(sh, x, gy, gw, gbias);
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

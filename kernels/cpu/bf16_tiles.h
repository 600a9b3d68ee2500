// The BF16 convolutions and matrix products on tiles (conv_tiles.h, gemm_tiles.h) for the
// engine: which tile unit this CPU uses, and one entry per pass that runs the driver on it.
// Implemented in bf16_tiles.cpp (emulated), tiles_avx512_bf16.cpp and gemm_amx_hw.cpp.
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

namespace kernels::cpu {

// Emulated: the AMX instructions written out (slow; tests and reference). Avx512Bf16: the tile
// interface on VDPBF16PS. Amx: the tile instructions themselves.
enum class TileUnit { Emulated, Avx512Bf16, Amx };
const char* tile_unit_name(TileUnit unit);

// The unit the engine's BF16 kernels use: from cpu_isa() (AMX, else AVX512-BF16), where this
// build has its kernels. False: none, and BF16 data keeps the widened FP32 kernels (as FP16 does
// on every CPU). ENGINE_CPU_ISA=avx512 turns the tiles off.
bool bf16_tile_unit(TileUnit* unit);
bool avx512_bf16_kernels_built();

// Which convolutions the engine sends to the tiles: one group, channels that pad to 32 with
// little waste (the 3-channel stem would do 10x the work), and at least 60% of the computed
// pixels real (not stride 2, not 4 x 4 images). The rest keeps the widened FP32 kernels. The
// data gradient also needs stride 1, square filters and pad <= r - 1 (it runs as a forward
// convolution of gy).
bool tile_forward_fits(const ConvShape& sh);
bool tile_backward_data_fits_engine(const ConvShape& sh);
bool tile_backward_filter_fits(const ConvShape& sh);

// conv2d_forward / conv2d_backward_data / conv2d_backward_filter (conv.h) on BF16 data, FP32
// accumulation, on `unit`; any channel count and stride (the data gradient: stride 1, r == s,
// pad <= r - 1). bias and gbias may be null. The filter gradient's bits do not depend on the
// thread count.
void conv2d_forward_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* x, const bfloat16* w,
                               const bfloat16* bias, bfloat16* y);
void conv2d_backward_data_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* gy, const bfloat16* w,
                                     bfloat16* gx);
void conv2d_backward_filter_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* x, const bfloat16* gy,
                                       bfloat16* gw, bfloat16* gbias);
// gemm()'s contract (gemm.h) for BF16 operands on `unit`, C in FP32 or BF16.
template <class Out>
void gemm_bf16_tiles(TileUnit unit, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha,
                     const bfloat16* A, int64_t lda, const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc);

// The per-unit entries behind the dispatch (the hardware ones check the unit is in use).
namespace tiles_avx512_bf16 {
void conv_forward(const ConvShape&, const bfloat16*, const bfloat16*, const bfloat16*, bfloat16*);
void conv_backward_data(const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*);
void conv_backward_filter(const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*, bfloat16*);
template <class Out>
void gemm(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*, int64_t, const bfloat16*, int64_t, double,
          Out*, int64_t);
}  // namespace tiles_avx512_bf16
namespace tiles_amx {
void conv_forward(const ConvShape&, const bfloat16*, const bfloat16*, const bfloat16*, bfloat16*);
void conv_backward_data(const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*);
void conv_backward_filter(const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*, bfloat16*);
}  // namespace tiles_amx

}  // namespace kernels::cpu

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

// Which BF16 convolutions the engine sends to the tiles: one group, at least 16 input channels.
// Below that (the 3-channel stems) an im2col row is a few short copies per pixel and costs more
// than its products; the widened FP32 kernels were measured faster there (bench_cpu_conv).
bool tile_conv_worth_it(const ConvShape& sh);

// Every dense BF16 convolution that is worth it goes to the tiles where the CPU has a unit. Two routes
// (conv_tiles.h): the flat one without a column matrix, where the padding wastes little, and
// im2col + tile GEMM for the rest (stride 2, 1 x 1, 4 x 4 images).
// TileRoute forces one, for tests and benchmarks.
enum class TileRoute { Auto, Flat, Columns };
const char* tile_route_name(TileRoute route);
// The route Auto takes for each pass of sh.
TileRoute tile_forward_route(const ConvShape& sh);
TileRoute tile_backward_data_route(const ConvShape& sh);
TileRoute tile_backward_filter_route(const ConvShape& sh);

// conv2d_forward / conv2d_backward_data / conv2d_backward_filter (conv.h) on BF16 data, one
// group, FP32 accumulation, on `unit`; bias and gbias may be null; the forward applies ReLU in
// its store when asked. The flat route of the data
// gradient needs stride 1, square filters and pad <= r - 1. The filter gradient's bits do not
// depend on the thread count.
void conv2d_forward_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* x, const bfloat16* w,
                               const bfloat16* bias, bfloat16* y, TileRoute route = TileRoute::Auto,
                               bool relu = false);
void conv2d_backward_data_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* gy, const bfloat16* w,
                                     bfloat16* gx, TileRoute route = TileRoute::Auto);
void conv2d_backward_filter_bf16_tiles(TileUnit unit, const ConvShape& sh, const bfloat16* x, const bfloat16* gy,
                                       bfloat16* gw, bfloat16* gbias, TileRoute route = TileRoute::Auto);
// gemm()'s contract (gemm.h) for BF16 operands on `unit`, C in FP32 or BF16.
template <class Out>
void gemm_bf16_tiles(TileUnit unit, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha,
                     const bfloat16* A, int64_t lda, const bfloat16* B, int64_t ldb, double beta, Out* C, int64_t ldc);

// Each unit's store (n <= 32 FP32 sums plus bias rounded to BF16) and 32 x 32 transpose of
// 16-bit values: what the kernels use around the tiles, here for the tests.
void tile_round_row(TileUnit unit, const float* sum, const float* bias, bfloat16* out, int64_t n, bool relu = false);
void tile_transpose32(TileUnit unit, const uint16_t* src, int64_t src_stride, uint16_t* dst, int64_t dst_stride);

// The unit's peak on this core: GFLOP/s of back-to-back dpbf16ps into four accumulators whose
// operands stay in tile registers (no loads), timed for about `seconds` on the calling thread.
double tile_peak_gflops(TileUnit unit, double seconds = 0.05);

// The per-unit entries behind the dispatch (the hardware ones check the unit is in use).
namespace tiles_avx512_bf16 {
double peak_gflops(double seconds);
void round_row(const float*, const float*, bfloat16*, int64_t, bool);
void transpose32(const uint16_t*, int64_t, uint16_t*, int64_t);
void conv_forward(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, const bfloat16*, bfloat16*, bool);
void conv_backward_data(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*);
void conv_backward_filter(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*, bfloat16*);
template <class Out>
void gemm(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*, int64_t, const bfloat16*, int64_t, double,
          Out*, int64_t);
}  // namespace tiles_avx512_bf16
namespace tiles_amx {
double peak_gflops(double seconds);
void round_row(const float*, const float*, bfloat16*, int64_t, bool);
void transpose32(const uint16_t*, int64_t, uint16_t*, int64_t);
void conv_forward(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, const bfloat16*, bfloat16*, bool);
void conv_backward_data(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*);
void conv_backward_filter(TileRoute, const ConvShape&, const bfloat16*, const bfloat16*, bfloat16*, bfloat16*);
}  // namespace tiles_amx

}  // namespace kernels::cpu

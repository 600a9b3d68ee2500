// INT8 inference kernels: u8 x s8 -> s32 matrix products and convolutions (implicit GEMM from
// NHWC activations) with the requantizing epilogue fused into the store: the per-channel
// multiplier, bias, residual add and ReLU, written as uint8 or int8. The s32 sums are exact, so
// every path (the portable loops, AVX-VNNI, AVX512-VNNI, AMX) writes the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kernels::cpu::int8 {

// cpu_int8_path() takes AMX-INT8 (TDPBUSD on 16 x 64-byte tiles) where cpu_isa() is Amx (the
// tile permission granted) and the CPU has AMX-INT8; else AVX512-VNNI where the CPU has it (with
// AVX512BW/VL) and ENGINE_CPU_ISA is not capped below avx512; else AVX-VNNI (256-bit VPDPBUSD,
// VEX-encoded, with AVX2) where the CPU has it and the cap is not below avx2; else the portable
// loops. ENGINE_INT8_PATH=generic|avx_vnni|avx512_vnni|amx_emulated|amx picks one.
// AmxEmulated runs the tile driver on amx::EmulatedTiles (amx_tiles.h) on any CPU, so its
// packing and tails are tested everywhere; slow, it is for tests. AvxVnni runs its 256-bit tiles
// with the EVEX encoding of the same instruction on AVX512-VNNI CPUs without AVX-VNNI, so its
// code is tested there too.
enum class Int8Path { Generic, AvxVnni, Avx512Vnni, AmxEmulated, Amx };
// Decided at the first call; a bad or unavailable ENGINE_INT8_PATH ends the process as
// cpu_isa.h's rule for environment switches says (one line, exit code 2).
Int8Path cpu_int8_path();
// Why ENGINE_INT8_PATH is refused on this CPU ("" when unset, empty or usable here).
std::string int8_path_env_error();
const char* int8_path_name(Int8Path p);
// Every path this CPU can run (Generic first): what the bit-exactness tests compare.
std::vector<Int8Path> int8_paths_available();

// Weights W [n][k] (a conv's KRSC rows) packed as the dot-product instructions read them:
// groups of 4 consecutive k of consecutive outputs, [k4][n_padded][4] (one 64-byte row holds a
// quad of 16 outputs: VPDPBUSD's vector, TDPBUSD's B tile row), zero-padded to k4 = ceil(k / 4)
// quads and n_padded = n rounded up to 16; for the tile paths to whole tiles, k4 a multiple of
// 16 (64 K per tile) and n_padded of 32 (two B tiles).
struct PackedWeights {
  int64_t n = 0, k = 0, k4 = 0, n_padded = 0;
  bool tiles = false;  // the tile paths' padding
  std::vector<int8_t> data;
  std::vector<int32_t> row_sums;  // sum over k of W[j][k]: the zero-point correction's factor
};
PackedWeights pack_weights(const int8_t* w, int64_t n, int64_t k, Int8Path path);

// The epilogue, per output element (row m, channel j), all in the order written:
//   s = sum + correction[j]                                   (int32, exact)
//   f = fma(float(s), multiplier[j], offset[j])
//   f = fma(float(r - residual_zero_point), residual_multiplier, f)   with a residual r
//   f = clamp(f, lo - zero_point, hi - zero_point), lo = zero_point if relu (a NaN -> the low end)
//   out = nearbyint(f) + zero_point                           (ties to even)
// where [lo, hi] is [0, 255] for uint8 and [-128, 127] for int8 outputs.
struct Requant {
  const int32_t* correction = nullptr;  // [n]; nullptr: none
  const float* multiplier = nullptr;    // [n]: input scale * weight scale[j] / output scale
  const float* offset = nullptr;        // [n]: bias[j] / output scale
  const void* residual = nullptr;       // [m][n] laid out as the output (rows ldo apart), uint8 or int8
  bool residual_signed = false;
  int32_t residual_zero_point = 0;
  float residual_multiplier = 0;        // residual scale / output scale
  bool relu = false;
  bool out_signed = false;              // int8 output (else uint8)
  int32_t zero_point = 0;
};

// out[m][j] = epilogue(sum_k A[m][k] * W[j][k]) for m < rows, j < n. A: uint8 rows `lda` bytes
// apart with 4 * k4 readable bytes each (bytes past k multiply W's zero padding). Without an
// epilogue (ep == nullptr) out is int32 and holds the sums. out rows are `ldo` elements apart.
void gemm_u8s8(Int8Path path, const uint8_t* a, int64_t rows, int64_t lda, const PackedWeights& w,
               const Requant* ep, void* out, int64_t ldo);

struct ConvGeometry {
  int64_t batch = 1, height = 1, width = 1, in_channels = 1, kernel = 1, stride = 1, pad = 0;
  int64_t out_height() const { return (height + 2 * pad - kernel) / stride + 1; }
  int64_t out_width() const { return (width + 2 * pad - kernel) / stride + 1; }
};
// Convolution of NHWC uint8 x (zero point x_zero_point: the padding takes that value, so
// it stands for 0.0) with packed KRSC weights (w.k = kernel * kernel * in_channels): NHWC output
// [batch, out_height, out_width, w.n], epilogue as gemm_u8s8 (residual laid out as the output).
// An implicit GEMM: with in_channels a multiple of 4 the kernels read each window from a padded
// copy of x (a 1x1 stride-1 convolution from x itself); otherwise (channels not a multiple of 4; Int8Net
// pads the 3-channel image to 4 first) each thread gathers its rows' windows first. The tile
// paths always gather.
void conv2d_u8s8(Int8Path path, const uint8_t* x, uint8_t x_zero_point, const ConvGeometry& g,
                 const PackedWeights& w, const Requant* ep, void* out);

namespace detail {
// Where a block of A rows lives: row r's quad q (bytes 4q..4q+3 of its K) is at
//   row[r] + (q / segment_quads) * segment_stride + 4 * (q % segment_quads),
// so a convolution reads its windows straight from the zero-point-padded input, one contiguous
// run (a window row: kernel x in_channels bytes) per kernel row.
struct RowSource {
  const uint8_t* const* row = nullptr;
  int64_t segment_quads = 0;   // quads per run; the weights' k4 is a whole number of runs
  int64_t segment_stride = 0;  // bytes from one run to the next
};
// `rows` rows of the product on one path; `row0` is the first row's index in the output (for
// the residual). Defined in int8_gemm.cpp (Generic), int8_vnni.cpp and int8_avx_vnni.cpp.
void gemm_rows_generic(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                       int64_t ldo, int64_t row0);
void gemm_rows_avx512_vnni(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                           int64_t ldo, int64_t row0);
bool avx512_vnni_compiled();
// The 256-bit tiles: VEX-encoded VPDPBUSD (int8_avx_vnni.cpp), and EVEX-encoded (int8_vnni.cpp).
void gemm_rows_avx_vnni(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                        int64_t ldo, int64_t row0);
void gemm_rows_avx_vnni_evex(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                             int64_t ldo, int64_t row0);
bool avx_vnni_compiled();
// The tile paths (int8_amx.cpp, int8_amx_hw.cpp): rows of A `lda` bytes apart (lda = 4 * k4),
// readable up to `rows` rounded up to 32.
void gemm_rows_amx_emulated(const uint8_t* a, int64_t rows, int64_t lda, const PackedWeights& w, const Requant* ep,
                            void* out, int64_t ldo, int64_t row0);
void gemm_rows_amx(const uint8_t* a, int64_t rows, int64_t lda, const PackedWeights& w, const Requant* ep, void* out,
                   int64_t ldo, int64_t row0);
bool amx_int8_compiled();
// The epilogue on `count` consecutive outputs from their sums (AVX-512; int8_vnni.cpp), and its
// scalar definition (int8_gemm.cpp): the same bits.
void requantize_row_avx512(const int32_t* sums, int64_t j0, int64_t count, const Requant& ep, void* out_row,
                           const uint8_t* res_row);
int32_t requantize(int32_t sum, int64_t j, const Requant& e, const void* residual_row);
}  // namespace detail

}  // namespace kernels::cpu::int8

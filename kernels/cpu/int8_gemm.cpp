// The INT8 kernels' drivers (int8_gemm.h): weight packing, the choice of path, the row
// chunks the threads share, the convolution's gather of input rows, and the portable path.
#include "kernels/cpu/int8_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/threads.h"
#include "kernels/error.h"


namespace kernels::cpu::int8 {

namespace {
// Rows one thread takes at a time: a multiple of each VNNI tile's rows (6, 12 or 24), small
// enough that the chunk's gathered inputs stay in L2 while every output column block reads them.
// Products take at most this many, in chunks of any size shared evenly (a last partial tile each).
constexpr int64_t kRowChunk = 48;
// Scratch slots (scratch.h): the convolution's gathered rows; a K-padded copy of A; the
// portable path's sums; the zero-point-padded input (the calling thread's, read by all).
constexpr int kSlotGather = 0, kSlotPaddedA = 1, kSlotSums = 2, kSlotPaddedInput = 3;
}  // namespace

const char* int8_path_name(Int8Path p) {
  switch (p) {
    case Int8Path::Generic: return "generic";
    case Int8Path::AvxVnni: return "avx_vnni";
    case Int8Path::Avx512Vnni: return "avx512_vnni";
    case Int8Path::AmxEmulated: return "amx_emulated";
    case Int8Path::Amx: return "amx";
  }
  return "?";
}

namespace {
bool vnni_available() {
  static const bool available = [] {
    const CpuFeatures f = detect_cpu_features();
    // cpu_isa() applies ENGINE_CPU_ISA: a cap below avx512 keeps the portable loops.
    return cpu_isa() >= CpuIsa::Avx512 && f.avx512_vnni && f.avx512bw && f.avx512vl && detail::avx512_vnni_compiled();
  }();
  return available;
}

// AVX-VNNI's own (VEX) encoding: with AVX2, under a cap of avx2 or above.
bool vex_vnni_available() {
  static const bool available = [] {
    const CpuFeatures f = detect_cpu_features();
    return cpu_isa() >= CpuIsa::Avx2 && f.avx_vnni && f.avx2 && f.fma && f.os_avx && detail::avx_vnni_compiled();
  }();
  return available;
}

// The 256-bit tiles run in either encoding.
bool avx_vnni_path_available() { return vex_vnni_available() || vnni_available(); }

}  // namespace

bool amx_int8_available() {
  // cpu_isa() is Amx only once Linux granted the tile data permission.
  static const bool available =
      cpu_isa() == CpuIsa::Amx && detect_cpu_features().amx_int8 && vnni_available() && detail::amx_int8_compiled();
  return available;
}

bool tile_path(Int8Path p) { return p == Int8Path::AmxEmulated || p == Int8Path::Amx; }

namespace {

// The path ENGINE_INT8_PATH asks for (`forced`, nullptr when unset or empty), or the best this
// CPU runs; throws when the name is unknown or the CPU lacks the path.
Int8Path int8_path_from_env(const char* forced) {
  if (forced) {
    const std::string f = forced;
    if (f == "generic") return Int8Path::Generic;
    if (f == "amx_emulated") return Int8Path::AmxEmulated;
    ENGINE_CHECK(f == "avx_vnni" || f == "avx512_vnni" || f == "amx",
                 "ENGINE_INT8_PATH must be one of generic, avx_vnni, avx512_vnni, amx_emulated, amx; got '" << f << "'");
    if (f == "avx_vnni") {
      ENGINE_CHECK(avx_vnni_path_available(),
                   "ENGINE_INT8_PATH=avx_vnni on a CPU (or ENGINE_CPU_ISA) without AVX-VNNI or AVX512-VNNI");
      return Int8Path::AvxVnni;
    }
    if (f == "amx") {
      ENGINE_CHECK(amx_int8_available(), "ENGINE_INT8_PATH=amx on a CPU (or ENGINE_CPU_ISA, or an OS) without AMX-INT8");
      return Int8Path::Amx;
    }
    ENGINE_CHECK(vnni_available(), "ENGINE_INT8_PATH=avx512_vnni on a CPU (or ENGINE_CPU_ISA) without AVX512-VNNI");
    return Int8Path::Avx512Vnni;
  }
  return amx_int8_available()   ? Int8Path::Amx
         : vnni_available()     ? Int8Path::Avx512Vnni
         : vex_vnni_available() ? Int8Path::AvxVnni
                                : Int8Path::Generic;
}

}  // namespace

Int8Path cpu_int8_path() {
  static const Int8Path path = [] {
    try {
      return int8_path_from_env(env_switch("ENGINE_INT8_PATH"));
    } catch (const Error& e) {
      exit_bad_env_switch(e.message());
    }
  }();
  return path;
}

std::string int8_path_env_error() {
  const char* forced = env_switch("ENGINE_INT8_PATH");
  if (!forced) return "";
  try {
    int8_path_from_env(forced);
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

std::vector<Int8Path> int8_paths_available() {
  std::vector<Int8Path> paths = {Int8Path::Generic, Int8Path::AmxEmulated};
  if (avx_vnni_path_available()) paths.push_back(Int8Path::AvxVnni);
  if (vnni_available()) paths.push_back(Int8Path::Avx512Vnni);
  if (amx_int8_available()) paths.push_back(Int8Path::Amx);
  return paths;
}

PackedWeights pack_weights(const int8_t* w, int64_t n, int64_t k, Int8Path path) {
  ENGINE_CHECK(n > 0 && k > 0, "pack_weights: " << n << " x " << k << " weights");
  // Sums must fit int32: |sum| <= 255 * 128 * k (and the zero-point correction as much again).
  ENGINE_CHECK(k <= 32768, "pack_weights: K = " << k << " products per output could overflow the int32 sums");
  PackedWeights p;
  p.tiles = tile_path(path);
  p.n = n, p.k = k, p.k4 = (k + 3) / 4, p.n_padded = (n + 15) / 16 * 16;
  if (p.tiles) p.k4 = (p.k4 + 15) / 16 * 16, p.n_padded = (n + 31) / 32 * 32;
  p.data.assign(static_cast<size_t>(p.k4 * p.n_padded * 4), 0);
  p.row_sums.assign(static_cast<size_t>(n), 0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t kk = 0; kk < k; ++kk) {
      const int8_t v = w[j * k + kk];
      p.data[static_cast<size_t>(((kk / 4) * p.n_padded + j) * 4 + kk % 4)] = v;
      p.row_sums[j] += v;
    }
  return p;
}

namespace detail {

// One output of the epilogue, exactly as int8_gemm.h writes it (the vector paths do the same
// operations in the same order, so the bits agree).
int32_t requantize(int32_t sum, int64_t j, const Requant& e, const void* residual_row) {
  const int32_t s = sum + (e.correction ? e.correction[j] : 0);
  float f = std::fma(static_cast<float>(s), e.multiplier[j], e.offset[j]);
  if (e.residual) {
    const int32_t r = e.residual_signed ? static_cast<const int8_t*>(residual_row)[j]
                                        : static_cast<const uint8_t*>(residual_row)[j];
    f = std::fma(static_cast<float>(r - e.residual_zero_point), e.residual_multiplier, f);
  }
  const float qmin = e.out_signed ? -128.f : 0.f, qmax = e.out_signed ? 127.f : 255.f;
  const float zp = static_cast<float>(e.zero_point);
  const float lo = e.relu ? 0.f : qmin - zp, hi = qmax - zp;
  f = f > lo ? f : lo;  // as MAXPS/MINPS: a NaN becomes lo, so every path agrees even then
  f = f < hi ? f : hi;
  return static_cast<int32_t>(std::nearbyint(f)) + e.zero_point;
}

void gemm_rows_generic(const RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep, void* out,
                       int64_t ldo, int64_t row0) {
  int32_t* sums = scratch<int32_t>(kSlotSums, w.n_padded);
  const int64_t quad_stride = w.n_padded * 4, segments = w.k4 / a.segment_quads;
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(sums, sums + w.n_padded, 0);
    for (int64_t seg = 0; seg < segments; ++seg) {
      const uint8_t* ar = a.row[r] + seg * a.segment_stride;
      for (int64_t qq = 0; qq < a.segment_quads; ++qq) {
        const int32_t a0 = ar[4 * qq], a1 = ar[4 * qq + 1], a2 = ar[4 * qq + 2], a3 = ar[4 * qq + 3];
        const int8_t* b = w.data.data() + (seg * a.segment_quads + qq) * quad_stride;
        for (int64_t j = 0; j < w.n_padded; ++j)
          sums[j] += a0 * b[4 * j] + a1 * b[4 * j + 1] + a2 * b[4 * j + 2] + a3 * b[4 * j + 3];
      }
    }
    if (!ep) {
      std::memcpy(static_cast<int32_t*>(out) + r * ldo, sums, static_cast<size_t>(w.n) * sizeof(int32_t));
      continue;
    }
    const int64_t m = row0 + r;
    const void* res_row = ep->residual ? static_cast<const uint8_t*>(ep->residual) + m * ldo : nullptr;
    if (ep->out_signed) {
      int8_t* o = static_cast<int8_t*>(out) + r * ldo;
      for (int64_t j = 0; j < w.n; ++j) o[j] = static_cast<int8_t>(requantize(sums[j], j, *ep, res_row));
    } else {
      uint8_t* o = static_cast<uint8_t*>(out) + r * ldo;
      for (int64_t j = 0; j < w.n; ++j) o[j] = static_cast<uint8_t>(requantize(sums[j], j, *ep, res_row));
    }
  }
}

}  // namespace detail

namespace {

void gemm_rows(Int8Path path, const detail::RowSource& a, int64_t rows, const PackedWeights& w, const Requant* ep,
               void* out, int64_t ldo, int64_t row0) {
  // The tile paths read A as 32-row blocks of rows 4 * k4 bytes apart (the callers lay it out so).
  if (path == Int8Path::AmxEmulated)
    detail::gemm_rows_amx_emulated(a.row[0], rows, 4 * w.k4, w, ep, out, ldo, row0);
  else if (path == Int8Path::Amx)
    detail::gemm_rows_amx(a.row[0], rows, 4 * w.k4, w, ep, out, ldo, row0);
  else if (path == Int8Path::Avx512Vnni)
    detail::gemm_rows_avx512_vnni(a, rows, w, ep, out, ldo, row0);
  else if (path == Int8Path::AvxVnni && vex_vnni_available())
    detail::gemm_rows_avx_vnni(a, rows, w, ep, out, ldo, row0);
  else if (path == Int8Path::AvxVnni)  // the same tiles, the instruction's EVEX encoding
    detail::gemm_rows_avx_vnni_evex(a, rows, w, ep, out, ldo, row0);
  else
    detail::gemm_rows_generic(a, rows, w, ep, out, ldo, row0);
}

size_t out_elem_bytes(const Requant* ep) { return ep ? 1 : sizeof(int32_t); }

void check_path(Int8Path path, const PackedWeights& w) {
  const bool runs = path == Int8Path::Generic || path == Int8Path::AmxEmulated ||
                    (path == Int8Path::AvxVnni && avx_vnni_path_available()) ||
                    (path == Int8Path::Avx512Vnni && vnni_available()) || (path == Int8Path::Amx && amx_int8_available());
  ENGINE_CHECK(runs, "the " << int8_path_name(path) << " INT8 kernels asked for on a CPU (or ENGINE_CPU_ISA) without them");
  ENGINE_CHECK(w.tiles == tile_path(path), "INT8 weights packed for " << (w.tiles ? "the tile paths" : "the vector paths")
                                                                      << ", used on " << int8_path_name(path));
}

// Rows for the tile paths: whole 32-row blocks.
int64_t tile_rows_of(int64_t m) { return (m + 31) / 32 * 32; }

}  // namespace

void gemm_u8s8(Int8Path path, const uint8_t* a, int64_t rows, int64_t lda, const PackedWeights& w,
               const Requant* ep, void* out, int64_t ldo) {
  check_path(path, w);
  if (rows <= 0) return;
  // A whole number of chunks per thread (as many rows each as can be, none over kRowChunk):
  // cut at 48, a linear layer's rows were shared unevenly (128 rows as 48 + 48 + 32 on two threads).
  const int64_t team = max_team_size(), fewest = (rows + kRowChunk - 1) / kRowChunk;
  const int64_t chunks = std::min(rows, (fewest + team - 1) / team * team), padded = 4 * w.k4;
  // Rows shorter than the packed K are copied into zero-padded ones (the linear layers whose
  // inputs are not a multiple of 4 bytes, and every input of the tile paths: whole tiles).
  const bool tiles = tile_path(path), copy = tiles || lda < padded || w.k % 4 != 0;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t m0 = c * rows / chunks, m = (c + 1) * rows / chunks - m0;  // at most 48: chunks >= rows / 48
    const uint8_t* rows_a = a + m0 * lda;
    int64_t ld = lda;
    if (copy) {
      const int64_t buffer_rows = tiles ? tile_rows_of(m) : m;
      uint8_t* buf = scratch<uint8_t>(kSlotPaddedA, buffer_rows * padded);
      for (int64_t r = 0; r < m; ++r) {
        std::memcpy(buf + r * padded, a + (m0 + r) * lda, static_cast<size_t>(w.k));
        std::memset(buf + r * padded + w.k, 0, static_cast<size_t>(padded - w.k));
      }
      std::memset(buf + m * padded, 0, static_cast<size_t>((buffer_rows - m) * padded));
      rows_a = buf, ld = padded;
    }
    const uint8_t* ptr[kRowChunk];
    for (int64_t r = 0; r < m; ++r) ptr[r] = rows_a + r * ld;
    const detail::RowSource src{ptr, w.k4, 0};
    gemm_rows(path, src, m, w, ep, static_cast<uint8_t*>(out) + m0 * ldo * out_elem_bytes(ep), ldo, m0);
  }
}

void conv2d_u8s8(Int8Path path, const uint8_t* x, uint8_t x_zero_point, const ConvGeometry& g,
                 const PackedWeights& w, const Requant* ep, void* out) {
  check_path(path, w);
  const int64_t oh = g.out_height(), ow = g.out_width(), cin = g.in_channels, k = g.kernel;
  ENGINE_CHECK(oh > 0 && ow > 0 && w.k == k * k * cin,
               "conv2d_u8s8: weights of K " << w.k << " for a " << k << "x" << k << "x" << cin << " window");
  const int64_t rows = g.batch * oh * ow, chunks = (rows + kRowChunk - 1) / kRowChunk;
  // A 1x1 stride-1 convolution reads its input rows as they are; with channels in whole quads
  // each window row is one run of a padded copy; otherwise windows are gathered.
  // The tile paths load A as tiles of rows equally far apart: always gathered.
  const bool tiles = tile_path(path);
  const bool direct = !tiles && k == 1 && g.stride == 1 && g.pad == 0 && cin % 4 == 0;
  const bool from_padded = !tiles && !direct && cin % 4 == 0;
  const int64_t hp = g.height + 2 * g.pad, wp = g.width + 2 * g.pad;
  const uint8_t* xp = x;
  if (from_padded && g.pad > 0) {
    uint8_t* copy = scratch<uint8_t>(kSlotPaddedInput, g.batch * hp * wp * cin);
    const size_t side = static_cast<size_t>(g.pad * cin), row = static_cast<size_t>(g.width * cin);
#pragma omp parallel for schedule(static)
    for (int64_t by = 0; by < g.batch * hp; ++by) {
      uint8_t* d = copy + by * wp * cin;
      const int64_t b = by / hp, y = by % hp - g.pad;
      if (y < 0 || y >= g.height) {
        std::memset(d, x_zero_point, static_cast<size_t>(wp * cin));
        continue;
      }
      std::memset(d, x_zero_point, side);
      std::memcpy(d + side, x + (b * g.height + y) * g.width * cin, row);
      std::memset(d + side + row, x_zero_point, side);
    }
    xp = copy;
  }
  const int64_t padded = 4 * w.k4;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t m0 = c * kRowChunk, m = std::min(kRowChunk, rows - m0);
    void* dst = static_cast<uint8_t*>(out) + m0 * w.n * out_elem_bytes(ep);
    const uint8_t* ptr[kRowChunk];
    detail::RowSource src{ptr, w.k4, 0};
    if (direct) {
      for (int64_t r = 0; r < m; ++r) ptr[r] = x + (m0 + r) * cin;
    } else if (from_padded) {
      // The chunk's first pixel by division, the rest by stepping (a division per row cost as
      // much as a 4-channel window's products).
      int64_t b = m0 / (oh * ow), oy = m0 / ow % oh, ox = m0 % ow;
      const int64_t step = g.stride * cin;
      const uint8_t* p = xp + ((b * hp + oy * g.stride) * wp + ox * g.stride) * cin;
      for (int64_t r = 0; r < m; ++r, p += step) {
        ptr[r] = p;
        if (++ox == ow) {
          ox = 0;
          if (++oy == oh) oy = 0, ++b;
          p = xp + (b * hp + oy * g.stride) * wp * cin - step;
        }
      }
      src.segment_quads = k * cin / 4;
      src.segment_stride = wp * cin;
    } else {
      // Gather each output pixel's window (KRSC order, the weights' K order) into one row;
      // positions outside the image take the zero point.
      const int64_t buffer_rows = tiles ? tile_rows_of(m) : m;
      uint8_t* gathered = scratch<uint8_t>(kSlotGather, buffer_rows * padded);
      std::memset(gathered + m * padded, 0, static_cast<size_t>((buffer_rows - m) * padded));
      for (int64_t r = 0; r < m; ++r) {
        const int64_t p = m0 + r, b = p / (oh * ow), oy = p / ow % oh, ox = p % ow;
        uint8_t* dst_row = gathered + r * padded;
        for (int64_t ky = 0; ky < k; ++ky) {
          const int64_t iy = oy * g.stride - g.pad + ky;
          for (int64_t kx = 0; kx < k; ++kx) {
            const int64_t ix = ox * g.stride - g.pad + kx;
            uint8_t* d = dst_row + (ky * k + kx) * cin;
            if (iy < 0 || iy >= g.height || ix < 0 || ix >= g.width)
              std::memset(d, x_zero_point, static_cast<size_t>(cin));
            else
              std::memcpy(d, x + ((b * g.height + iy) * g.width + ix) * cin, static_cast<size_t>(cin));
          }
        }
        std::memset(dst_row + w.k, 0, static_cast<size_t>(padded - w.k));
        ptr[r] = dst_row;
      }
    }
    gemm_rows(path, src, m, w, ep, dst, w.n, m0);
  }
}

}  // namespace kernels::cpu::int8

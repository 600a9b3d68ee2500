// The CPU matrix-unit groundwork on every machine: the run-time ISA choice (CPUID against
// /proc/cpuinfo, ENGINE_CPU_ISA caps, a refused AMX permission falling back), the emulated
// TDPBF16PS against its definition, and the tile GEMM (packing, VNNI layout, tails) on the
// emulated tiles against the double reference loop. The hardware path: tests/amx/.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/philox.h"

namespace kc = kernels::cpu;
using kc::CpuIsa;
using kernels::bfloat16;

namespace {

kc::CpuFeatures amx_machine() {
  kc::CpuFeatures f;
  f.avx2 = f.fma = f.avx512f = f.avx512bw = f.avx512vl = f.avx512_bf16 = f.avx512_vnni = true;
  f.amx_tile = f.amx_bf16 = f.amx_int8 = true;
  f.os_avx = f.os_avx512 = f.os_amx = true;
  return f;
}
int asked = 0;
bool grant(std::string*) { return ++asked, true; }
bool refuse(std::string* why) {
  ++asked;
  *why = "refused for the test";
  return false;
}

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      for (std::string w; words >> w;) flags.insert(w);
      break;
    }
  return flags;
}

std::vector<bfloat16> random_bf16(size_t n, uint64_t seed, double scale = 1.0) {
  std::vector<bfloat16> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = bfloat16(scale * (2 * kernels::philox_uniform(seed, 0, i) - 1));
  return v;
}

}  // namespace

TEST_CASE("CPU ISA: the features CPUID reports are the ones /proc/cpuinfo lists", "[amx]") {
  const std::set<std::string> flags = proc_cpuinfo_flags();
  if (flags.empty()) {
    WARN("no /proc/cpuinfo flags line: nothing to compare with");
    return;
  }
  // A flag the kernel lists is a CPUID bit that is set (the kernel may hide one it cannot use,
  // e.g. AMX without XFD, so the other direction holds only together with the OS bits).
  const kc::CpuFeatures f = kc::detect_cpu_features();
  auto listed = [&](const char* flag) { return flags.count(flag) == 1; };
  CHECK((!listed("avx2") || f.avx2));
  CHECK((!listed("avx512f") || f.avx512f));
  CHECK((!listed("avx512_bf16") || f.avx512_bf16));
  CHECK((!listed("avx512_fp16") || f.avx512_fp16));
  CHECK((!listed("avx512_vnni") || f.avx512_vnni));
  CHECK((!listed("avx_vnni") || f.avx_vnni));
  CHECK((!listed("amx_tile") || f.amx_tile));
  CHECK((!listed("amx_bf16") || f.amx_bf16));
  CHECK((!listed("amx_int8") || f.amx_int8));
  CHECK((!(f.avx512f && f.os_avx512) || listed("avx512f")));
  CHECK((!(f.amx_tile && f.os_amx) || listed("amx_tile")));
  INFO(kc::cpu_isa_report());
  CHECK(kc::cpu_isa_report().rfind("CPU ISA: ", 0) == 0);
}

TEST_CASE("CPU ISA: the best the CPU allows, capped by ENGINE_CPU_ISA, AMX only when granted", "[amx]") {
  std::string note;
  asked = 0;
  CHECK(kc::resolve_cpu_isa(amx_machine(), "", grant, &note) == CpuIsa::Amx);
  CHECK(asked == 1);
  CHECK(note.empty());
  // A cap below AMX does not even ask for the permission.
  asked = 0;
  CHECK(kc::resolve_cpu_isa(amx_machine(), "avx512_bf16", grant, &note) == CpuIsa::Avx512Bf16);
  CHECK(kc::resolve_cpu_isa(amx_machine(), "avx2", grant, &note) == CpuIsa::Avx2);
  CHECK(kc::resolve_cpu_isa(amx_machine(), "generic", grant, &note) == CpuIsa::Generic);
  CHECK(asked == 0);
  // A refused permission: the next ISA down, and one line saying why.
  CHECK(kc::resolve_cpu_isa(amx_machine(), "", refuse, &note) == CpuIsa::Avx512Bf16);
  CHECK(note == "AMX present but not usable (refused for the test): using avx512_bf16");
  // The OS must save the tile state, and a cap above the CPU changes nothing.
  kc::CpuFeatures no_os = amx_machine();
  no_os.os_amx = false;
  CHECK(kc::resolve_cpu_isa(no_os, "amx", grant, &note) == CpuIsa::Avx512Bf16);
  kc::CpuFeatures avx2_only;
  avx2_only.avx2 = avx2_only.fma = avx2_only.os_avx = true;
  CHECK(kc::resolve_cpu_isa(avx2_only, "amx", grant, &note) == CpuIsa::Avx2);
  avx2_only.os_avx = false;  // the OS does not save YMM: nothing past generic
  CHECK(kc::resolve_cpu_isa(avx2_only, "", grant, &note) == CpuIsa::Generic);
  CHECK_THROWS_WITH(kc::resolve_cpu_isa(amx_machine(), "avx9", grant, &note),
                    Catch::Contains("ENGINE_CPU_ISA must be one of generic, avx2, avx512, avx512_bf16, amx"));
}

TEST_CASE("emulated TDPBF16PS: exact BF16 products, FP32 sums in the SDM's order, DAZ and FTZ", "[amx]") {
  namespace amx = kc::amx;
  auto f = [](uint16_t bits) { return kernels::bf16_bits_to_float(bits); };
  // Products of two BF16 values are exact in FP32 (8 + 8 significant bits): one pair alone,
  // added to zero, gives the product exactly.
  for (uint64_t i = 0; i < 2000; ++i) {
    const bfloat16 a(static_cast<float>(std::ldexp(2 * kernels::philox_uniform(5, 1, i) - 1, int(i % 40) - 20)));
    const bfloat16 b(static_cast<float>(std::ldexp(2 * kernels::philox_uniform(5, 2, i) - 1, int(i % 30) - 15)));
    const double exact = double(float(a)) * double(float(b));
    REQUIRE(double(amx::fma_daz_ftz(float(a), float(b), 0.f)) == exact);
  }
  // DAZ: a subnormal input counts as zero (each case below gives something else without it).
  CHECK(amx::fma_daz_ftz(f(0x0001) /* 2^-133 */, f(0x4b00) /* 2^23 */, 0.f) == 0.f);  // else 2^-110
  CHECK(amx::fma_daz_ftz(f(0x0080) /* 2^-126 */, 1.f, std::ldexp(1.f, -140)) == FLT_MIN);  // a subnormal accumulator
  // FTZ: a subnormal result is a zero of its sign; tininess is judged after rounding with an
  // unbounded exponent, so FLT_MIN - 2^-150.5 (which rounds to FLT_MIN on the subnormal grid)
  // is tiny and flushed, while FLT_MIN - 2^-152 rounds to FLT_MIN and stays.
  CHECK(amx::fma_daz_ftz(FLT_MIN, 0.5f, 0.f) == 0.f);
  CHECK(std::signbit(amx::fma_daz_ftz(FLT_MIN, -0.5f, 0.f)));
  CHECK(amx::fma_daz_ftz(std::ldexp(1.f, -75), -std::ldexp(1.f, -75), FLT_MIN) == 0.f);  // FLT_MIN - 2^-150
  CHECK(amx::fma_daz_ftz(std::ldexp(1.f, -76), -std::ldexp(1.f, -76), FLT_MIN) == FLT_MIN);  // FLT_MIN - 2^-152
  // The order: even and odd products in two lanes from zero, then their sum added to C. With
  // products (2^24, 1, -2^24, 1) one chain C += p in order gives 1 (2^24 + 1 rounds back to
  // 2^24); the SDM's lanes give 2^24 - 2^24 = 0 and 1 + 1 = 2, so C = 2.
  {
    amx::EmulatedTiles t;
    amx::TileConfig cfg;
    cfg.rows[0] = 1, cfg.colsb[0] = 4;  // C: 1 x 1 FP32
    cfg.rows[4] = 1, cfg.colsb[4] = 8;  // A: 1 row of 2 pairs
    cfg.rows[6] = 2, cfg.colsb[6] = 4;  // B: 2 pair rows of 1 column
    t.configure(cfg);
    const uint16_t a[4] = {0x4b80 /* 2^24 */, 0x3f80, 0xcb80 /* -2^24 */, 0x3f80}, b[4] = {0x3f80, 0x3f80, 0x3f80, 0x3f80};
    const float c0 = 0.f;
    t.load<0>(&c0, 4);
    t.load<4>(a, 8);
    t.load<6>(b, 4);
    t.dpbf16ps<0, 4, 6>();
    float c = -1.f;
    t.store<0>(&c, 4);
    CHECK(c == 2.f);
    // A shape the hardware refuses (#UD) is refused here too: B's rows must be A's pairs.
    cfg.rows[6] = 1;
    t.configure(cfg);
    CHECK_THROWS_WITH((t.dpbf16ps<0, 4, 6>()), Catch::Contains("#UD"));
  }

  // One instruction on a whole tile against the definition in double: row m, column n is the
  // sum over the 32 K values of A[m][k] B[k][n], added in order; each of the 32 adds rounds
  // once, so |emulated - exact| <= 32 * 2^-24 * (|C0| + sum |products|).
  amx::EmulatedTiles t;
  amx::TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.rows[i] = 16, cfg.colsb[i] = 64;
  t.configure(cfg);
  const std::vector<bfloat16> a = random_bf16(16 * 32, 11), bv = random_bf16(16 * 32, 12);
  std::vector<float> c0(256);
  for (int i = 0; i < 256; ++i) c0[i] = float(2 * kernels::philox_uniform(13, 0, i) - 1);
  t.load<0>(c0.data(), 64);
  t.load<4>(a.data(), 64);
  t.load<6>(bv.data(), 64);  // already in VNNI layout: row k/2 holds (k, n), (k+1, n) side by side
  t.dpbf16ps<0, 4, 6>();
  std::vector<float> c(256);
  t.store<0>(c.data(), 64);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      double exact = c0[m * 16 + n], mag = std::fabs(c0[m * 16 + n]);
      for (int k = 0; k < 32; ++k) {
        const double p = double(float(a[m * 32 + k])) * double(float(bv[kc::amx::vnni_index(k, n)]));
        exact += p;
        mag += std::fabs(p);
      }
      REQUIRE(std::fabs(c[m * 16 + n] - exact) <= 32 * std::ldexp(1.0, -24) * mag);
    }
  // Rows and bytes beyond a tile's configuration load as zeros and are not stored.
  cfg.rows[5] = 3;
  cfg.colsb[5] = 8;
  t.configure(cfg);
  std::vector<float> ones(256, 1.f), back(256, -1.f);
  t.load<5>(ones.data(), 64);
  t.store<5>(back.data(), 64);
  CHECK(back[0] == 1.f);
  CHECK(back[1] == 1.f);
  CHECK(back[2] == -1.f);        // beyond 8 bytes of the row
  CHECK(back[3 * 16] == -1.f);   // beyond 3 rows
}

TEST_CASE("tile GEMM on emulated AMX tiles matches the double reference, tails and transposes included", "[amx]") {
  struct Shape { int64_t m, n, k; };
  // K and N not multiples of the tile (32 K values, 16 columns), single rows, a 3-channel-like K.
  const std::vector<Shape> shapes = {{1, 1, 1},   {3, 13, 3},   {16, 16, 32},  {17, 31, 33},
                                     {32, 32, 64}, {45, 70, 27}, {64, 18, 100}, {5, 100, 13}};
  for (const Shape& s : shapes)
    for (kc::Trans ta : {kc::Trans::N, kc::Trans::T})
      for (kc::Trans tb : {kc::Trans::N, kc::Trans::T}) {
        INFO("M " << s.m << " N " << s.n << " K " << s.k << " ta " << (ta == kc::Trans::T) << " tb "
                  << (tb == kc::Trans::T));
        const int64_t lda = (ta == kc::Trans::N ? s.k : s.m) + 3, ldb = (tb == kc::Trans::N ? s.n : s.k) + 1;
        const int64_t rows_a = ta == kc::Trans::N ? s.m : s.k, rows_b = tb == kc::Trans::N ? s.k : s.n;
        const std::vector<bfloat16> A = random_bf16(rows_a * lda, 21), B = random_bf16(rows_b * ldb, 22);
        const int64_t ldc = s.n + 2;
        std::vector<float> C(s.m * ldc), C0(s.m * ldc);
        for (size_t i = 0; i < C.size(); ++i) C0[i] = float(2 * kernels::philox_uniform(23, 0, i) - 1);
        C = C0;
        const double alpha = 0.75, beta = -0.5;
        kc::gemm_bf16_tiles_emulated<float>(ta, tb, s.m, s.n, s.k, alpha, A.data(), lda, B.data(), ldb, beta,
                                            C.data(), ldc);
        std::vector<bfloat16> Cb(s.m * ldc, bfloat16(0.f));
        kc::gemm_bf16_tiles_emulated<bfloat16>(ta, tb, s.m, s.n, s.k, 1.0, A.data(), lda, B.data(), ldb, 0.0,
                                               Cb.data(), ldc);
        // FP32 sums of K exact products: K * 2^-24 of the magnitude, then alpha * acc and the
        // beta term add two more roundings; the BF16 output rounds once more (2^-8 relative).
        for (int64_t i = 0; i < s.m; ++i)
          for (int64_t j = 0; j < s.n; ++j) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < s.k; ++k) {
              const double a = float(ta == kc::Trans::N ? A[i * lda + k] : A[k * lda + i]);
              const double b = float(tb == kc::Trans::N ? B[k * ldb + j] : B[j * ldb + k]);
              ref += a * b;
              mag += std::fabs(a * b);
            }
            const double want = alpha * ref + beta * C0[i * ldc + j];
            const double bound = (s.k + 3) * std::ldexp(1.0, -24) * (alpha * mag + std::fabs(beta * C0[i * ldc + j]));
            REQUIRE(std::fabs(C[i * ldc + j] - want) <= bound);
            REQUIRE(std::fabs(double(float(Cb[i * ldc + j])) - ref) <=
                    std::ldexp(1.0, -8) * std::fabs(ref) + (s.k + 1) * std::ldexp(1.0, -24) * mag);
          }
        // The padding columns of C stay untouched.
        for (int64_t i = 0; i < s.m; ++i) {
          REQUIRE(C[i * ldc + s.n] == C0[i * ldc + s.n]);
          REQUIRE(C[i * ldc + s.n + 1] == C0[i * ldc + s.n + 1]);
        }
      }
}

TEST_CASE("tile GEMM on emulated AMX tiles: K in several chunks and B in several column panels", "[amx]") {
  // K 2100 runs as chunks of at most 1024 (the sums kept in FP32 between them), N 300 as panels
  // of 256 columns (tile_gemm_blocks' cache blocking); against the double reference.
  const int64_t M = 40, N = 300, K = 2100;
  const std::vector<bfloat16> A = random_bf16(M * K, 24), B = random_bf16(K * N, 25);
  std::vector<float> C(M * N);
  kc::gemm_bf16_tiles_emulated<float>(kc::Trans::N, kc::Trans::N, M, N, K, 1.0, A.data(), K, B.data(), N, 0.0,
                                      C.data(), N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double ref = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(float(A[i * K + k])) * double(float(B[k * N + j]));
        ref += p;
        mag += std::fabs(p);
      }
      INFO("C[" << i << "][" << j << "]");
      REQUIRE(std::fabs(C[i * N + j] - ref) <= (K + 1) * std::ldexp(1.0, -24) * mag);
    }
}

TEST_CASE("tile GEMM: beta 0 never reads C, alpha 0 or K 0 reads neither A nor B", "[amx]") {
  std::vector<bfloat16> A = random_bf16(4 * 5, 31), B = random_bf16(5 * 6, 32);
  std::vector<float> C(4 * 6, std::nanf(""));
  kc::gemm_bf16_tiles_emulated<float>(kc::Trans::N, kc::Trans::N, 4, 6, 5, 1.0, A.data(), 5, B.data(), 6, 0.0,
                                      C.data(), 6);
  for (float v : C) CHECK(std::isfinite(v));
  std::vector<bfloat16> nanA(4 * 5, bfloat16(std::nanf("")));
  std::vector<float> C2(4 * 6, 2.f);
  kc::gemm_bf16_tiles_emulated<float>(kc::Trans::N, kc::Trans::N, 4, 6, 5, 0.0, nanA.data(), 5, B.data(), 6, 0.5,
                                      C2.data(), 6);
  for (float v : C2) CHECK(v == 1.f);
  kc::gemm_bf16_tiles_emulated<float>(kc::Trans::N, kc::Trans::N, 4, 6, 0, 1.0, nanA.data(), 5, B.data(), 6, 2.0,
                                      C2.data(), 6);
  for (float v : C2) CHECK(v == 2.f);
}

// The AMX hardware path of the tile GEMM, on CPUs that have it (main.cpp skips elsewhere, with
// the reason): against the double reference with the emulation's bound, and against the
// emulation itself, element by element.
#define CATCH_CONFIG_RUNNER
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "catch2/catch.hpp"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/gemm_amx.h"
#include "kernels/philox.h"

namespace kc = kernels::cpu;
using kernels::bfloat16;

int main(int argc, char** argv) {
  if (kc::cpu_isa() != kc::CpuIsa::Amx || !kc::amx_kernels_built()) {
    std::printf("SKIPPED: the AMX tests need AMX-TILE/AMX-BF16 granted to this process%s: %s\n",
                kc::amx_kernels_built() ? "" : " and a build with AMX kernels", kc::cpu_isa_report().c_str());
    return 77;
  }
  std::printf("%s\n", kc::cpu_isa_report().c_str());
  return Catch::Session().run(argc, argv);
}

TEST_CASE("AMX tile GEMM on the hardware: within the bound, and bit for bit the emulation", "[amx_hw]") {
  struct Shape { int64_t m, n, k; };
  // The last two run K in chunks and B in column panels (tile_gemm_blocks' cache blocking).
  for (const Shape& s : {Shape{1, 1, 1}, Shape{17, 31, 33}, Shape{45, 70, 27}, Shape{64, 64, 256}, Shape{130, 40, 3},
                         Shape{40, 300, 2100}, Shape{70, 520, 1030}}) {
    INFO("M " << s.m << " N " << s.n << " K " << s.k);
    std::vector<bfloat16> A(s.m * s.k), B(s.k * s.n);
    for (size_t i = 0; i < A.size(); ++i) A[i] = bfloat16(float(2 * kernels::philox_uniform(41, 0, i) - 1));
    for (size_t i = 0; i < B.size(); ++i) B[i] = bfloat16(float(2 * kernels::philox_uniform(42, 0, i) - 1));
    std::vector<float> hw(s.m * s.n), emu(s.m * s.n);
    kc::gemm_bf16_tiles_amx<float>(kc::Trans::N, kc::Trans::N, s.m, s.n, s.k, 1.0, A.data(), s.k, B.data(), s.n, 0.0,
                                   hw.data(), s.n);
    kc::gemm_bf16_tiles_emulated<float>(kc::Trans::N, kc::Trans::N, s.m, s.n, s.k, 1.0, A.data(), s.k, B.data(), s.n,
                                        0.0, emu.data(), s.n);
    size_t differ = 0, first = 0;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t k = 0; k < s.k; ++k) {
          const double p = double(float(A[i * s.k + k])) * double(float(B[k * s.n + j]));
          ref += p;
          mag += std::fabs(p);
        }
        REQUIRE(std::fabs(hw[i * s.n + j] - ref) <= (s.k + 1) * std::ldexp(1.0, -24) * mag);
        if (std::memcmp(&hw[i * s.n + j], &emu[i * s.n + j], sizeof(float)) != 0 && differ++ == 0) first = i * s.n + j;
      }
    // Seen on AMX hardware (Xeon, 2026-12-04): the unit adds as the SDM's Operation section says
    // (two lanes per column, then their sum into C; one rounding per FMA), so its bits equal the
    // emulation's, K chunks included. Any difference is a failure, reported with the first one.
    INFO(differ << " of " << s.m * s.n << " elements differ from the emulation's bits; the first, [" << first / s.n
                << "][" << first % s.n << "]: hardware " << hw[first] << ", emulation " << emu[first]);
    CHECK(differ == 0);
  }
}

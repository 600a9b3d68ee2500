// The INT8 kernels on this CPU's dot-product unit (AVX512-VNNI): every convolution and product case of tests/int8_cases.h against the plain integer
// loops, bit for bit. main exits 77 (skipped, with the reason) where the CPU, or
// ENGINE_CPU_ISA, gives no VNNI path.
#define CATCH_CONFIG_RUNNER
#include <cstdio>

#include "../int8_cases.h"
#include "kernels/cpu/cpu_isa.h"

namespace k8 = kernels::cpu::int8;

int main(int argc, char** argv) {
  if (k8::int8_paths_available().size() < 2) {
    std::printf("SKIPPED: the INT8 hardware tests need AVX512-VNNI (with AVX512BW/VL) in use: %s\n",
                kernels::cpu::cpu_isa_report().c_str());
    return 77;
  }
  std::printf("INT8 path %s; %s\n", k8::int8_path_name(k8::cpu_int8_path()), kernels::cpu::cpu_isa_report().c_str());
  return Catch::Session().run(argc, argv);
}

TEST_CASE("int8 kernels on AVX512-VNNI: convolutions and products against plain integer loops", "[int8_hw]") {
  int8_cases::check_conv(k8::Int8Path::Avx512Vnni);
  int8_cases::check_gemm(k8::Int8Path::Avx512Vnni);
}

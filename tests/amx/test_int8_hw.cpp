// The INT8 kernels on this CPU's dot-product units (AVX-VNNI's 256-bit tiles, in either encoding;
// AVX512-VNNI; AMX-INT8 where granted):
// every convolution and product case of tests/int8_cases.h against the plain integer loops, bit
// for bit. main exits 77 (skipped, with the reason) where the CPU, or ENGINE_CPU_ISA, gives
// neither.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <vector>

#include "../int8_cases.h"
#include "kernels/cpu/cpu_isa.h"

namespace k8 = kernels::cpu::int8;

static std::vector<k8::Int8Path> hardware_paths() {
  std::vector<k8::Int8Path> out;
  for (k8::Int8Path p : k8::int8_paths_available())
    if (p == k8::Int8Path::AvxVnni || p == k8::Int8Path::Avx512Vnni || p == k8::Int8Path::Amx) out.push_back(p);
  return out;
}

int main(int argc, char** argv) {
  if (hardware_paths().empty()) {
    std::printf("SKIPPED: the INT8 hardware tests need AVX-VNNI, AVX512-VNNI (with AVX512BW/VL) or AMX-INT8 in use: %s\n",
                kernels::cpu::cpu_isa_report().c_str());
    return 77;
  }
  std::printf("INT8 path %s; %s\n", k8::int8_path_name(k8::cpu_int8_path()), kernels::cpu::cpu_isa_report().c_str());
  return Catch::Session().run(argc, argv);
}

TEST_CASE("int8 kernels on the hardware (AVX-VNNI, AVX512-VNNI, AMX-INT8): against plain integer loops", "[int8_hw]") {
  for (k8::Int8Path path : hardware_paths()) {
    WARN("INT8 path " << k8::int8_path_name(path));
    int8_cases::check_conv(path);
    int8_cases::check_gemm(path);
  }
}

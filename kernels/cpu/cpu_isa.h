// What this CPU can do, found at run time (CPUID and XCR0), and which instruction set the
// run-time-dispatched kernels (the matrix-unit ones) use: the best the CPU and the OS allow,
// capped by ENGINE_CPU_ISA, with AMX only once Linux has granted the tile data permission.
// The rest of the CPU code is compiled for the build machine (-march=native).
#pragma once

#include <string>

namespace kernels::cpu {

// Ordered: a later one includes what the kernels need of the earlier ones.
enum class CpuIsa { Generic, Avx2, Avx512, Avx512Bf16, Amx };

struct CpuFeatures {
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false, avx512_fp16 = false, avx512_vnni = false, avx_vnni = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
  bool os_avx = false, os_avx512 = false, os_amx = false;  // XCR0: the OS saves those registers
};

// CPUID leaf 7 (subleaves 0 and 1) and leaf 1, and XGETBV(0); all false off x86.
CpuFeatures detect_cpu_features();

// Asks Linux for the AMX tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM), once per
// process: without it the first tile instruction kills the process with SIGILL. False, with
// the reason, when refused or not Linux.
bool request_amx_permission(std::string* why);

// The ISA from the features, a cap ("" for none; else generic, avx2, avx512, avx512_bf16 or
// amx, as ENGINE_CPU_ISA takes) and a way to ask for AMX (tests inject a refusal). `note`
// gets one line when AMX was available but not granted. Throws on an unknown cap.
CpuIsa resolve_cpu_isa(const CpuFeatures& f, const std::string& cap, bool (*ask_amx)(std::string* why),
                       std::string* note);

// This process's ISA: resolve_cpu_isa on this CPU and ENGINE_CPU_ISA, decided at the first
// call (thread-safe); a refused permission is said once on stderr.
CpuIsa cpu_isa();
const char* cpu_isa_name(CpuIsa isa);
// One line for --version and the benchmarks: the ISA in use, what the CPU has, the cap.
std::string cpu_isa_report();

// The engine's environment switches (ENGINE_CPU_ISA, ENGINE_INT8_PATH, ENGINE_CUDNN_LOG) follow
// one rule: unset or empty means the default; any other value must be one the switch names,
// else the program ends with one `error:` line and exit code 2 (the tools check them all at
// start, models/cli.h; the kernels, whichever reads one first otherwise).
// The switch's value, or nullptr when unset or empty.
const char* env_switch(const char* name);
// Why ENGINE_CPU_ISA is refused ("" when it is unset, empty or a known name).
std::string cpu_isa_env_error();
// Ends the process as the rule says: "error: <message>" on stderr, exit code 2.
[[noreturn]] void exit_bad_env_switch(const std::string& message);

}  // namespace kernels::cpu

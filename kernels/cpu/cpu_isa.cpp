// Run-time CPU feature detection and the choice of the matrix-unit ISA (cpu_isa.h).
#include "kernels/cpu/cpu_isa.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cpu/gemm_amx.h"
#include "kernels/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KERNELS_X86 1
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kernels::cpu {

namespace {
#if defined(KERNELS_X86)
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif
bool bit(unsigned v, int b) { return (v >> b) & 1u; }
}  // namespace

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(KERNELS_X86)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = bit(c, 27);
  f.fma = bit(c, 12);
  if (osxsave) {
    const uint64_t xcr0 = xgetbv0();
    f.os_avx = (xcr0 & 0x6) == 0x6;              // XMM and YMM state
    f.os_avx512 = f.os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (xcr0 & 0x60000) == 0x60000;      // XTILECFG (17), XTILEDATA (18)
  }
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = bit(b, 5);
  f.avx512f = bit(b, 16);
  f.avx512bw = bit(b, 30);
  f.avx512vl = bit(b, 31);
  f.avx512_vnni = bit(c, 11);
  f.amx_bf16 = bit(d, 22);
  f.avx512_fp16 = bit(d, 23);
  f.amx_tile = bit(d, 24);
  f.amx_int8 = bit(d, 25);
  __cpuid_count(7, 1, a, b, c, d);
  f.avx_vnni = bit(a, 4);
  f.avx512_bf16 = bit(a, 5);
#endif
  return f;
}

bool request_amx_permission(std::string* why) {
#if defined(__linux__) && defined(KERNELS_X86)
  constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    if (why) *why = "arch_prctl(ARCH_REQ_XCOMP_PERM) refused the tile data permission";
    return false;
  }
  unsigned long perm = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) != 0 || !((perm >> kXfeatureXtiledata) & 1ul)) {
    if (why) *why = "arch_prctl(ARCH_GET_XCOMP_PERM) does not show the tile data permission";
    return false;
  }
  return true;
#else
  if (why) *why = "AMX needs Linux on x86-64";
  return false;
#endif
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::Generic: return "generic";
    case CpuIsa::Avx2: return "avx2";
    case CpuIsa::Avx512: return "avx512";
    case CpuIsa::Avx512Bf16: return "avx512_bf16";
    case CpuIsa::Amx: return "amx";
  }
  return "?";
}

namespace {

constexpr CpuIsa kAllIsas[] = {CpuIsa::Generic, CpuIsa::Avx2, CpuIsa::Avx512, CpuIsa::Avx512Bf16, CpuIsa::Amx};

std::string unknown_cap_message(const std::string& cap) {
  return "ENGINE_CPU_ISA must be one of generic, avx2, avx512, avx512_bf16, amx; got '" + cap + "'";
}

bool known_cap(const std::string& cap) {
  for (CpuIsa i : kAllIsas)
    if (cap == cpu_isa_name(i)) return true;
  return false;
}

}  // namespace

const char* env_switch(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

std::string cpu_isa_env_error() {
  const char* cap = env_switch("ENGINE_CPU_ISA");
  return cap && !known_cap(cap) ? unknown_cap_message(cap) : "";
}

void exit_bad_env_switch(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::exit(2);
}

CpuIsa resolve_cpu_isa(const CpuFeatures& f, const std::string& cap, bool (*ask_amx)(std::string* why),
                       std::string* note) {
  CpuIsa limit = CpuIsa::Amx;
  if (!cap.empty()) {
    ENGINE_CHECK(known_cap(cap), unknown_cap_message(cap));
    for (CpuIsa i : kAllIsas)
      if (cap == cpu_isa_name(i)) limit = i;
  }
  CpuIsa best = CpuIsa::Generic;
  if (f.avx2 && f.fma && f.os_avx) best = CpuIsa::Avx2;
  if (best == CpuIsa::Avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.os_avx512) best = CpuIsa::Avx512;
  if (best == CpuIsa::Avx512 && f.avx512_bf16) best = CpuIsa::Avx512Bf16;
  if (note) note->clear();
  // AMX is asked for only when it would be used: the permission grows the signal frame.
  if (best == CpuIsa::Avx512Bf16 && f.amx_tile && f.amx_bf16 && f.os_amx && limit == CpuIsa::Amx) {
    std::string why;
    if (ask_amx(&why)) best = CpuIsa::Amx;
    else if (note) *note = "AMX present but not usable (" + why + "): using " + cpu_isa_name(best);
  }
  return static_cast<int>(best) < static_cast<int>(limit) ? best : limit;
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = [] {
    const char* cap = env_switch("ENGINE_CPU_ISA");
    std::string note;
    CpuIsa i = CpuIsa::Generic;
    try {
      CpuFeatures f = detect_cpu_features();
      if (!amx_kernels_built()) f.amx_tile = false;  // nothing here could use it
      i = resolve_cpu_isa(f, cap ? cap : "", request_amx_permission, &note);
    } catch (const Error& e) {
      exit_bad_env_switch(e.message());  // a misspelt cap: whoever asked first
    }
    if (!note.empty()) std::fprintf(stderr, "engine: %s\n", note.c_str());
    return i;
  }();
  return isa;
}

std::string cpu_isa_report() {
  const CpuFeatures f = detect_cpu_features();
  std::string has;
  auto add = [&](bool on, const char* name) {
    if (on) has += std::string(has.empty() ? "" : " ") + name;
  };
  add(f.avx2 && f.fma, "avx2");
  add(f.avx512f, "avx512f");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.avx_vnni, "avx_vnni");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.amx_tile, "amx_tile");
  add(f.amx_bf16, "amx_bf16");
  add(f.amx_int8, "amx_int8");
  const char* cap = env_switch("ENGINE_CPU_ISA");
  return std::string("CPU ISA: ") + cpu_isa_name(cpu_isa()) + " for the matrix-unit kernels (CPU has: " +
         (has.empty() ? "none of these" : has) + (cap ? std::string("; capped by ENGINE_CPU_ISA=") + cap : "") +
         ")";
}

}  // namespace kernels::cpu

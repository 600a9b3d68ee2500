#!/usr/bin/env bash
# The AVX-VNNI kernels' object must hold VEX code only: an EVEX instruction (a zmm register, a
# mask register k0-k7, or ymm16-ymm31) would fault on the CPUs the path is for (AVX-VNNI, no
# AVX-512). Argument: the engine's objects (';'-separated, as CMake lists them).
set -euo pipefail
object=""
IFS=';' read -r -a objects <<< "$1"
for o in "${objects[@]}"; do [[ $o == */int8_avx_vnni.cpp.o ]] && object=$o; done
[[ -n $object ]] || { echo "vex_only: no int8_avx_vnni.cpp.o among the engine's objects" >&2; exit 1; }
command -v objdump >/dev/null || { echo "skipped: no objdump"; exit 77; }
listing=$(objdump -d --no-show-raw-insn "$object")
grep -q 'vpdpbusd' <<< "$listing" || { echo "skipped: this compiler built no AVX-VNNI kernels (GCC 11 or later does)"; exit 77; }
evex=$(grep -E 'zmm|%k[0-7]|%ymm(1[6-9]|2[0-9]|3[01])\b' <<< "$listing" || true)
if [[ -n $evex ]]; then
  echo "vex_only: EVEX-only registers in $object:" >&2
  head -5 <<< "$evex" >&2
  exit 1
fi
echo "vex_only: $(grep -c 'vpdpbusd' <<< "$listing") vpdpbusd, all VEX; no zmm, mask or upper-16 registers"

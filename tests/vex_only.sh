#!/usr/bin/env bash
# The AVX-VNNI kernels' object must hold VEX code only, so that a CPU with both AVX-VNNI and
# AVX-512 runs the VEX form this file is for, and one without AVX-512 can run it at all. EVEX
# shows as a zmm, mask (k0-k7) or upper-16 (xmm/ymm16-31) register, an embedded broadcast
# ({1toN}), or an instruction starting with the EVEX prefix byte 62; every vpdpbusd must be
# the {vex} form. Argument: the engine's objects (';'-separated, as CMake lists them).
set -euo pipefail
object=""
IFS=';' read -r -a objects <<< "$1"
for o in "${objects[@]}"; do [[ $o == */int8_avx_vnni.cpp.o ]] && object=$o; done
[[ -n $object ]] || { echo "vex_only: no int8_avx_vnni.cpp.o among the engine's objects" >&2; exit 1; }
command -v objdump >/dev/null || { echo "skipped: no objdump"; exit 77; }
listing=$(objdump -d --insn-width=15 "$object")
dots=$(grep -c 'vpdpbusd' <<< "$listing" || true)
[[ $dots -gt 0 ]] || { echo "skipped: this compiler built no AVX-VNNI kernels (GCC 11 or later does)"; exit 77; }
# objdump -d lines: "  addr:<TAB>hex bytes<TAB>mnemonic operands".
evex=$(grep -E '%zmm|%k[0-7]|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\{1to[0-9]+\}|^ *[0-9a-f]+:'$'\t''62 ' <<< "$listing" || true)
plain=$(grep 'vpdpbusd' <<< "$listing" | grep -v '{vex}' || true)
if [[ -n $evex || -n $plain ]]; then
  echo "vex_only: EVEX code in $object:" >&2
  printf '%s\n%s\n' "$evex" "$plain" | grep -v '^$' | head -5 >&2 || true  # head may close the pipe early
  exit 1
fi
echo "vex_only: $dots vpdpbusd, all {vex}; no EVEX prefix, zmm, mask or upper-16 registers"

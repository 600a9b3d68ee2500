#!/usr/bin/env bash
# BF16 on the CPU's BF16 unit (AMX or AVX512-BF16) trains as well as BF16 widened to FP32 (the
# path of CPUs without one, forced here with ENGINE_CPU_ISA=avx512): train_e2e.sh's recipe, seed
# for seed, over SEEDS seeds (seed 1's unit run is the log train_e2e_bf16 left in WORKDIR). The
# mean paired difference of test accuracy must lie within 3 standard errors of it, SD / sqrt(SEEDS),
# SD the spread of one paired difference measured over seeds (figures in CMakeLists.txt). Exits
# 77 (skipped) where the CPU has no BF16 unit in use: both runs would be the same run.
#   tests/train_e2e_isa.sh TRAINER DATA_DIR|synthetic WORKDIR SEEDS SD
set -euo pipefail
trainer="$1" data="$2" work="$3" seeds="$4" sd="$5"
isa=$("$trainer" --version | sed -n 's/^CPU ISA: \([a-z0-9_]*\) for.*/\1/p')
if [ "$isa" != amx ] && [ "$isa" != avx512_bf16 ]; then
  echo "SKIPPED: the BF16-unit comparison needs AMX or AVX512-BF16 in use ($("$trainer" --version | grep '^CPU ISA'))"
  exit 77
fi
accuracy_of() { grep '"event":"summary"' "$1" | sed 's/.*"test_accuracy":\([0-9.]*\).*/\1/'; }
# train ISA SEED LOG: train_e2e.sh's recipe in BF16 (ISA "" keeps the CPU's own); prints the accuracy.
train() {
  local args=(--device cpu --precision bf16 --epochs 2 --batch-size 64 --seed "$2" --log "$3" --cache "$work/cache")
  if [ "$data" = synthetic ]; then args+=(--synthetic --synthetic-size 10000)
  else args+=(--data "$data" --subset 10000); fi
  rm -f "$3"
  if [ -n "$1" ]; then ENGINE_CPU_ISA="$1" "$trainer" "${args[@]}" >"$3.out" 2>&1 || { cat "$3.out" >&2; return 1; }
  else "$trainer" "${args[@]}" >"$3.out" 2>&1 || { cat "$3.out" >&2; return 1; }; fi
  grep -q "BF16 matrix products on" "$3.out" && grep "BF16 matrix products on" "$3.out" >&2
  accuracy_of "$3"
}
unit_log="$work/train-bf16.jsonl"
# train_e2e_bf16's log, written by this trainer (not one left by an older build or a failed run)
[ -f "$unit_log" ] && [ "$unit_log" -nt "$trainer" ] && [ -n "$(accuracy_of "$unit_log")" ] ||
  { echo "no fresh BF16 run in $unit_log (run train_e2e_bf16 first)" >&2; exit 1; }
diffs=""
for ((seed = 1; seed <= seeds; ++seed)); do
  if [ "$seed" = 1 ]; then a=$(accuracy_of "$unit_log"); else a=$(train "" "$seed" "$work/train-bf16-seed$seed.jsonl"); fi
  w=$(train avx512 "$seed" "$work/train-bf16-widened-seed$seed.jsonl")
  [ -n "$a" ] && [ -n "$w" ] || { echo "seed $seed: a run gave no test accuracy" >&2; exit 1; }
  echo "seed $seed: BF16 on $isa $a%, widened $w%"
  diffs="$diffs $(awk -v a="$a" -v w="$w" 'BEGIN { print a - w }')"
done
awk -v d="$diffs" -v sd="$sd" -v isa="$isa" 'BEGIN {
  n = split(d, v, " "); s = 0; for (i = 1; i <= n; ++i) s += v[i]; mean = s / n
  bound = 3 * sd / sqrt(n)
  printf "BF16 on %s minus widened BF16 over %d seed(s): mean %+.2f points; allowed within +-%.2f (3 x %.2f / sqrt(%d))\n",
         isa, n, mean, bound, sd, n
  exit !(mean <= bound && mean >= -bound)
}'

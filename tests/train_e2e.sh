#!/usr/bin/env bash
# A real, short training run on the CPU must learn: simplecnn on the first 10,000 CIFAR-10
# training images (or the synthetic stand-in when no CIFAR-10 is given), two epochs, then
# the test accuracy must clear a bar well above chance (10%).
#
# With an optimizer-state format other than fp32 (6th argument) the run is also compared with
# the same run on FP32 state, seed for seed, over SEEDS seeds (seed 1's FP32-state log is the
# one the fp32-state test of that precision left in WORKDIR; the others are run here). The mean
# paired difference must lie within 1 point (the claim: 8-bit state trains as well, to a point)
# plus 3 standard errors of that mean, SD / sqrt(SEEDS), where SD is the spread of one paired
# difference measured over seeds (see CMakeLists.txt for the figures and where they came from).
#   tests/train_e2e.sh TRAINER DATA_DIR|synthetic PRECISION MIN_ACCURACY WORKDIR [STATE [SEEDS SD]]
set -euo pipefail
trainer="$1" data="$2" precision="$3" min_acc="$4" work="$5" state="${6:-fp32}" seeds="${7:-1}" sd="${8:-0}"
mkdir -p "$work"

accuracy_of() { grep '"event":"summary"' "$1" | sed 's/.*"test_accuracy":\([0-9.]*\).*/\1/'; }
# train STATE SEED LOG: the recipe above; prints the test accuracy.
train() {
  local args=(--device cpu --precision "$precision" --epochs 2 --batch-size 64 --seed "$2" --log "$3"
              --cache "$work/cache" --optimizer-state "$1")
  if [ "$data" = synthetic ]; then args+=(--synthetic --synthetic-size 10000)
  else args+=(--data "$data" --subset 10000); fi
  rm -f "$3"
  "$trainer" "${args[@]}" > "$3.out" 2>&1 || { cat "$3.out" >&2; return 1; }
  accuracy_of "$3"
}

suffix=$([ "$state" = fp32 ] && echo "" || echo "-$state")
log="$work/train-$precision$suffix.jsonl"
acc=$(train "$state" 1 "$log")
tail -3 "$log.out"
echo "test accuracy $acc% ($precision), bar $min_acc%"
awk -v a="$acc" -v m="$min_acc" 'BEGIN { exit !(a + 0 > m + 0) }'
[ "$state" = fp32 ] && exit 0

ref_log="$work/train-$precision.jsonl"
[ -f "$ref_log" ] || { echo "no FP32-state run in $ref_log to compare with (run train_e2e_$precision first)" >&2; exit 1; }
diffs="$(awk -v a="$acc" -v r="$(accuracy_of "$ref_log")" 'BEGIN { print a - r }')"
echo "seed 1: $state state $acc%, FP32 state $(accuracy_of "$ref_log")%"
for ((seed = 2; seed <= seeds; ++seed)); do
  a=$(train "$state" "$seed" "$work/train-$precision$suffix-seed$seed.jsonl")
  r=$(train fp32 "$seed" "$work/train-$precision-seed$seed.jsonl")
  echo "seed $seed: $state state $a%, FP32 state $r%"
  diffs="$diffs $(awk -v a="$a" -v r="$r" 'BEGIN { print a - r }')"
done
awk -v d="$diffs" -v sd="$sd" -v state="$state" 'BEGIN {
  n = split(d, v, " "); s = 0; for (i = 1; i <= n; ++i) s += v[i]; mean = s / n
  bound = 1 + 3 * sd / sqrt(n)
  printf "%s minus FP32 state over %d seed(s): mean %+.2f points; allowed within +-%.2f (1 + 3 x %.2f / sqrt(%d))\n",
         state, n, mean, bound, sd, n
  exit !(mean <= bound && mean >= -bound)
}'

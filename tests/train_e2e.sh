#!/usr/bin/env bash
# A real, short training run on the CPU must learn: simplecnn on the first 10,000 CIFAR-10
# training images (or the synthetic stand-in when no CIFAR-10 is given), two epochs, then
# the test accuracy must clear a bar well above chance (10%). With an optimizer-state format
# other than fp32 (6th argument) it must also come within one point of the same run with FP32
# state, whose log the fp32-state test of that precision left in WORKDIR.
#   tests/train_e2e.sh TRAINER DATA_DIR|synthetic PRECISION MIN_ACCURACY WORKDIR [STATE]
set -euo pipefail
trainer="$1" data="$2" precision="$3" min_acc="$4" work="$5" state="${6:-fp32}"
mkdir -p "$work"
suffix=$([ "$state" = fp32 ] && echo "" || echo "-$state")
log="$work/train-$precision$suffix.jsonl"
rm -f "$log"
args=(--device cpu --precision "$precision" --epochs 2 --batch-size 64 --seed 1 --log "$log" --cache "$work/cache"
      --optimizer-state "$state")
if [ "$data" = synthetic ]; then
  args+=(--synthetic --synthetic-size 10000)
else
  args+=(--data "$data" --subset 10000)
fi
"$trainer" "${args[@]}"
acc=$(grep '"event":"summary"' "$log" | sed 's/.*"test_accuracy":\([0-9.]*\).*/\1/')
echo "test accuracy $acc% ($precision), bar $min_acc%"
awk -v a="$acc" -v m="$min_acc" 'BEGIN { exit !(a + 0 > m + 0) }'
if [ "$state" != fp32 ]; then
  ref_log="$work/train-$precision.jsonl"
  [ -f "$ref_log" ] || { echo "no FP32-state run in $ref_log to compare with (run train_e2e_$precision first)" >&2; exit 1; }
  ref=$(grep '"event":"summary"' "$ref_log" | sed 's/.*"test_accuracy":\([0-9.]*\).*/\1/')
  echo "with $state optimizer state: $acc%; with FP32 state: $ref%"
  awk -v a="$acc" -v r="$ref" 'BEGIN { d = a - r; if (d < 0) d = -d; exit !(d <= 1.0) }'
fi

#!/usr/bin/env bash
# A real, short training run on the CPU must learn: simplecnn on the first 10,000 CIFAR-10
# training images (or the synthetic stand-in when no CIFAR-10 is given), two epochs, then
# the test accuracy must clear a bar well above chance (10%).
#   tests/train_e2e.sh TRAINER DATA_DIR|synthetic PRECISION MIN_ACCURACY WORKDIR
set -euo pipefail
trainer="$1" data="$2" precision="$3" min_acc="$4" work="$5"
mkdir -p "$work"
log="$work/train-$precision.jsonl"
rm -f "$log"
args=(--device cpu --precision "$precision" --epochs 2 --batch-size 64 --seed 1 --log "$log" --cache "$work/cache")
if [ "$data" = synthetic ]; then
  args+=(--synthetic --synthetic-size 10000)
else
  args+=(--data "$data" --subset 10000)
fi
"$trainer" "${args[@]}"
acc=$(grep '"event":"summary"' "$log" | sed 's/.*"test_accuracy":\([0-9.]*\).*/\1/')
echo "test accuracy $acc% ($precision), bar $min_acc%"
awk -v a="$acc" -v m="$min_acc" 'BEGIN { exit !(a + 0 > m + 0) }'

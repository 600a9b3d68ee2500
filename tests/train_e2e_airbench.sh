#!/usr/bin/env bash
# The airbench94 recipe on real data, short: its pieces (whitening from the data, parameter
# groups, the summed loss, the triangle schedule, reflect-padded crops, alternating flips, the
# weight average, TTA; not the bias freeze at epoch 3) on the first 6,000 CIFAR-10 training
# images (or the synthetic stand-in), batch 256, two epochs; then TTA accuracy over the first
# 2,000 test images must clear a bar derived from measured seeds (CMakeLists.txt gives the
# figures), and TTA must not lose to the plain evaluation of the same weights by more than
# their measured spread.
#   tests/train_e2e_airbench.sh TRAINER DATA_DIR|synthetic WORKDIR PRECISION MIN_TTA_ACCURACY MAX_TTA_LOSS [SEED]
set -euo pipefail
trainer="$1" data="$2" work="$3" precision="$4" min_tta="$5" max_loss="$6" seed="${7:-1}"
mkdir -p "$work"
log="$work/airbench-$precision-seed$seed.jsonl"
args=(--recipe airbench94 --device cpu --precision "$precision" --batch-size 256 --epochs 2 --seed "$seed"
      --log "$log" --cache "$work/cache" --log-every 20 --test-subset 2000)
if [ "$data" = synthetic ]; then args+=(--synthetic --synthetic-size 6000)
else args+=(--data "$data" --subset 6000); fi
rm -f "$log"
"$trainer" "${args[@]}" >"$log.out" 2>&1 || { cat "$log.out" >&2; exit 1; }
grep "^TTA accuracy" "$log.out" || { cat "$log.out" >&2; exit 1; }
line=$(grep '"event":"tta"' "$log") || { echo "no tta event in $log" >&2; exit 1; }
tta=$(sed 's/.*"tta_accuracy":\([0-9.]*\).*/\1/' <<<"$line")
plain=$(sed 's/.*"accuracy":\([0-9.]*\).*/\1/' <<<"$line")
number='^[0-9]+(\.[0-9]+)?$'
[[ $tta =~ $number && $plain =~ $number ]] || { echo "cannot read both accuracies from: $line" >&2; exit 1; }
echo "airbench94 ($precision, seed $seed): TTA $tta%, plain $plain%; bars: TTA above $min_tta%, TTA at most $max_loss below plain"
awk -v t="$tta" -v p="$plain" -v m="$min_tta" -v l="$max_loss" 'BEGIN { exit !(t + 0 > m + 0 && t + 0 >= p - l) }'

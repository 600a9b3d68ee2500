#!/usr/bin/env bash
# The benchmarks still run and report: bench_kernels and bench_train in quick mode on the CPU
# write JSON whose every row has a positive time and rate, and bad flags exit 2. (What they
# measure is judged by people reading the tables, never by a test.)
#   tests/bench_smoke.sh BENCH_KERNELS BENCH_TRAIN WORKDIR
set -uo pipefail
kernels="$1" train="$2" work="$3"
rm -rf "$work" && mkdir -p "$work"
fails=0
fail() { echo "FAILED: $1"; fails=$((fails + 1)); }

if "$kernels" --device cpu --quick --iters 2 --json "$work/kernels.json" > "$work/kernels.log" 2>&1; then
  rows=$(grep -c '"device":"cpu"' "$work/kernels.json")
  # Each group must be present; no row may have a zero or missing time or rate.
  for g in gemm conv memory; do
    grep -q "\"group\":\"$g\"" "$work/kernels.json" || fail "bench_kernels: no $g rows"
  done
  if grep -E '"(ms|rate)":(0[,}]|-|nan|inf)' "$work/kernels.json"; then fail "bench_kernels: a zero/invalid time or rate"; fi
  [ "$rows" -ge 20 ] || fail "bench_kernels: only $rows rows"
  echo "bench_kernels: $rows rows"
else
  cat "$work/kernels.log"; fail "bench_kernels --quick exited non-zero"
fi
"$kernels" --device tpu > /dev/null 2>&1; [ $? = 2 ] || fail "bench_kernels --device tpu should exit 2"
"$kernels" --bogus > /dev/null 2>&1; [ $? = 2 ] || fail "bench_kernels --bogus should exit 2"
for bad in 0 -1 2x ""; do
  "$kernels" --iters "$bad" > /dev/null 2>&1; [ $? = 2 ] || fail "bench_kernels --iters '$bad' should exit 2"
done
out=$(ENGINE_CUDNN_LOG=yes "$kernels" --device cpu --quick 2>&1); rc=$?
[ "$rc" = 2 ] && grep -q "^error: ENGINE_CUDNN_LOG must be 0 or 1" <<<"$out" && ! grep -q "CPU section" <<<"$out" ||
  fail "bench_kernels with ENGINE_CUDNN_LOG=yes: exit $rc, $(head -2 <<<"$out")"

if "$train" --quick --models simplecnn --steps 1 --json "$work/train.json" > "$work/train.log" 2>&1; then
  n=$(grep -o '"model":"simplecnn"' "$work/train.json" | wc -l)
  [ "$n" = 3 ] || fail "bench_train: $n simplecnn rows, want 3 (fp32, fp16, bf16)"
  if grep -E '"(images_per_s|epoch_s|peak_bytes)":(0(\.0+)?[,}]|-|nan|inf)' "$work/train.json"; then
    fail "bench_train: a zero/invalid figure"
  fi
else
  cat "$work/train.log"; fail "bench_train --quick exited non-zero"
fi

# --precisions picks rows; --profile adds the per-kernel table (and "kernels" in the JSON).
if "$train" --quick --models simplecnn --steps 1 --precisions f32 --profile --json "$work/profile.json" > "$work/profile.log" 2>&1; then
  n=$(grep -o '"model":"simplecnn"' "$work/profile.json" | wc -l)
  [ "$n" = 1 ] || fail "bench_train --precisions f32: $n rows, want 1"
  grep -q '"kernels":\[{"name":' "$work/profile.json" || fail "bench_train --profile: no kernels in the JSON"
  grep -q '"name":"conv2d backward filter"' "$work/profile.json" || fail "bench_train --profile: no conv2d backward filter row"
  grep -q 'time per kernel' "$work/profile.log" || fail "bench_train --profile: no table printed"
else
  cat "$work/profile.log"; fail "bench_train --precisions f32 --profile exited non-zero"
fi
"$train" --quick --precisions f64 > /dev/null 2>&1; [ $? = 2 ] || fail "bench_train --precisions f64 should exit 2"
for bad in 0 -1 2x ""; do
  "$train" --inference --rounds "$bad" > /dev/null 2>&1; [ $? = 2 ] || fail "bench_train --rounds '$bad' should exit 2"
done
# Bad values are refused before anything runs: exit 2, the error on the first line, no table.
# (--batch 0 and big benchmarked batch 256 and exited 0; --models "" printed an empty table;
# 1e999GiB was converted from infinity to an integer.)
refused() {  # refused WHAT-THE-LINE-SAYS ARGS...: exit 2, the first line says it, stdout empty
  local want="$1"; shift
  "$train" "$@" > "$work/refused.out" 2> "$work/refused.err"; local rc=$?
  if [ "$rc" != 2 ] || ! head -1 "$work/refused.err" | grep -qF -- "$want" || [ -s "$work/refused.out" ]; then
    fail "bench_train $* -> exit $rc, stdout $(wc -c < "$work/refused.out") bytes, stderr: $(head -2 "$work/refused.err")"
  fi
}
refused "--batch expects an integer >= 1, got '0'" --batch 0
refused "--batch expects an integer >= 1, got 'big'" --batch big
refused "--steps expects an integer" --steps -3
refused "--models expects a comma-separated list" --models ""
refused "--models expects a comma-separated list" --models ,
refused "--models: unknown model 'resnet34'" --memory --models resnet34
refused "--max-batch-under expects a size like 80GiB" --memory --max-batch-under 1e999GiB
refused "--max-batch-under expects a size like 80GiB" --memory --max-batch-under 0
refused "--batches expects an integer >= 1, got '0'" --memory --batches 0,8
refused "--rounds applies to --inference only" --rounds 3
refused "unknown option '--bogus'" --bogus
refused "--quick takes no value" --quick=1
# The environment switches: the same rule as the trainer's, even where the run never reads one.
ENGINE_CPU_ISA=avx9 refused "error: ENGINE_CPU_ISA must be one of" --memory --models simplecnn --batches 1,2
ENGINE_INT8_PATH=vnni9 refused "error: ENGINE_INT8_PATH must be one of" --memory --models simplecnn --batches 1,2
ENGINE_CUDNN_LOG=yes refused "error: ENGINE_CUDNN_LOG must be 0 or 1" --memory --models simplecnn --batches 1,2
# Empty is unset: the run goes on.
ENGINE_CPU_ISA= ENGINE_INT8_PATH= "$train" --memory --models simplecnn --batches 1,2 > "$work/memory.log" 2>&1 &&
  grep -q 'max batch' "$work/memory.log" || { cat "$work/memory.log"; fail "bench_train --memory with empty switches"; }

# Inference: resnet9 has batch-norm, so each dtype gets an unfolded and a folded row.
# Two rounds: the rows are still one per configuration, the ratios the rounds' medians.
if "$train" --inference --models resnet9 --batch 2 --steps 1 --rounds 2 > "$work/inference.log" 2>&1; then
  n=$(grep -cE '^resnet9 +(f32|f16|bf16) +(no|yes) ' "$work/inference.log")
  [ "$n" = 6 ] || { cat "$work/inference.log"; fail "bench_train --inference: $n resnet9 rows, want 6"; }
  n=$(grep -cE '^resnet9 +int8 +yes ' "$work/inference.log")
  [ "$n" = 1 ] || { cat "$work/inference.log"; fail "bench_train --inference: $n resnet9 int8 rows, want 1"; }
  grep -q 'fp16 folded vs fp32.*int8 vs fp32' "$work/inference.log" || fail "bench_train --inference: no ratio line"
  grep -q 'median of the 2 rounds' "$work/inference.log" || fail "bench_train --inference --rounds 2: not 2 rounds"
else
  cat "$work/inference.log"; fail "bench_train --inference exited non-zero"
fi

# One precision, profiled: the INT8 steps' rows by layer; no FP32 row, so no logit comparison.
if "$train" --inference --models simplecnn --batch 2 --steps 1 --rounds 1 --precisions int8 --profile \
    > "$work/int8_profile.log" 2>&1; then
  grep -qE '^simplecnn +int8 +yes .* - +-$' "$work/int8_profile.log" || { cat "$work/int8_profile.log"; fail "--precisions int8: want one int8 row without a comparison"; }
  for row in "int8 conv2d conv1" "int8 conv2d conv2" "int8 linear fc1"; do
    grep -q "^  $row " "$work/int8_profile.log" || { cat "$work/int8_profile.log"; fail "--inference --profile: no '$row' row"; }
  done
  grep -qE '^simplecnn +f32' "$work/int8_profile.log" && fail "--precisions int8 ran f32 too"
else
  cat "$work/int8_profile.log"; fail "bench_train --inference --precisions int8 --profile exited non-zero"
fi
"$train" --inference --precisions int4 > /dev/null 2>&1; [ $? = 2 ] || fail "bench_train --inference --precisions int4 should exit 2"
"$train" --inference --models resnet34 --precisions int8 > "$work/unknown.log" 2>&1
[ $? = 2 ] && grep -q "unknown model 'resnet34'" "$work/unknown.log" || { cat "$work/unknown.log"; fail "bench_train --inference --models resnet34 should exit 2 naming it"; }
# INT8 asked for where it gives no row: refused with a line, not an empty table.
"$train" --inference --models efficientnet_b0 --precisions int8 > "$work/int8_uncovered.log" 2>&1
[ $? = 2 ] && grep -q 'INT8 inference runs on the CPU' "$work/int8_uncovered.log" ||
  { cat "$work/int8_uncovered.log"; fail "bench_train --precisions int8 on efficientnet_b0 should exit 2 with a reason"; }

[ "$fails" = 0 ] && echo "bench smoke: all passed"
exit $((fails > 0))

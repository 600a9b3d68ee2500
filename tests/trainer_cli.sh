#!/usr/bin/env bash
# End-to-end checks of the trainer binary: bad flags and bad input fail with one clear
# line and the right exit code; an interrupted-and-resumed run gives bit-identical
# checkpoints; a truncated or altered checkpoint is refused.
#   tests/trainer_cli.sh TRAINER WORKDIR
set -uo pipefail
trainer="$1"
work="$2"
rm -rf "$work" && mkdir -p "$work"
fails=0
passes=0
pass() { echo "ok: $1"; passes=$((passes + 1)); }
fail() { echo "FAILED: $1"; fails=$((fails + 1)); }

# expect CODE PATTERN -- ARGS...: exit code and a stderr line matching PATTERN.
expect() {
  local code="$1" pattern="$2"
  shift 3
  local err rc
  err=$("$trainer" "$@" 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" = "$code" ] && grep -q -- "$pattern" <<<"$err"; then pass "$* -> exit $rc"; else
    fail "$* -> exit $rc (want $code), stderr: $err"; fi
}

expect 2 "unknown option '--bogus'" -- --bogus
expect 2 "--epochs expects a number > 0, got 'zero'" -- --epochs zero
expect 2 "--recipe must be airbench94, got 'airbench95'" -- --recipe airbench95
expect 2 "--freeze-after expects PARAMETER=EPOCHS" -- --freeze-after 0.bias
expect 2 "--flip must be one of random, alternating, none" -- --flip sideways
expect 2 "--lr-schedule triangle needs --warmup above 0" -- --lr-schedule triangle --warmup 0
expect 2 "--ema-rate expects a number from 0 to 1" -- --ema-rate 1.5
expect 2 "--warmup applies to --lr-schedule onecycle or triangle only" -- --warmup 0.3
expect 2 "--freeze-after: simplecnn has no parameter 'nope'" -- --device cpu --synthetic --synthetic-size 100 --freeze-after nope=1
expect 2 "--precision must be one of fp32, fp16, bf16" -- --precision fp8
expect 2 "--eval-only needs --resume" -- --eval-only
expect 2 "--lr needs a value" -- --lr
expect 1 "no CIFAR-10 found in $work/nothing" -- --data "$work/nothing" --device cpu
expect 1 "bad device 'tpu'" -- --device tpu
expect 1 "cannot open checkpoint" -- --resume "$work/missing.ckpt" --device cpu --synthetic --synthetic-size 100
# Captured first: grep -q may exit before a long help text is written, and pipefail would
# then see the trainer's SIGPIPE.
help=$("$trainer" --help); rc=$?
if [ "$rc" = 0 ] && grep -q -- "--precision P" <<<"$help" && grep -q -- "--inspect-numerics N" <<<"$help"; then
  pass "--help lists the flags"; else fail "--help -> exit $rc"; fi
expect 2 "--clip-grad-norm expects a number > 0, got '0'" -- --clip-grad-norm 0
expect 2 "--deterministic takes no value" -- --deterministic=1
expect 2 "--checkpoint-every needs --checkpoint FILE" -- --checkpoint-every 10
expect 2 "--threads expects an integer from 1 to 4096, got '2147483648'" -- --threads 2147483648
expect 2 "--epochs expects at most 1e6, got '99999999999999999999'" -- --epochs 99999999999999999999
expect 2 "--checkpoint-every expects an integer >= 1" -- --checkpoint-every 0 --checkpoint x.ckpt
# --version: the build, the CPU ISA in use, and in a CUDA build the loaded vs built library versions.
ver=$("$trainer" --version 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "CUDA backend" <<<"$ver" && grep -q "^CPU ISA: [a-z0-9_]* for the matrix-unit kernels" <<<"$ver" &&
   { ! grep -q "CUDA backend built" <<<"$ver" ||
     grep -q "cuDNN: *loaded [0-9]*, built with [0-9]" <<<"$ver"; }; then pass "--version: $(tr '\n' ';' <<<"$ver")"
else fail "--version -> exit $rc: $ver"; fi
# A misspelt ENGINE_CPU_ISA: one line and exit code 2, not a crash.
err=$(ENGINE_CPU_ISA=avx9 "$trainer" --version 2>&1 >/dev/null); rc=$?
if [ "$rc" = 2 ] && [ "$(wc -l <<<"$err")" = 1 ] && grep -q "^error: ENGINE_CPU_ISA must be one of" <<<"$err"; then
  pass "ENGINE_CPU_ISA=avx9 -> exit 2, one line"
else fail "ENGINE_CPU_ISA=avx9 -> exit $rc: $err"; fi
# The other switches follow the same rule (one line, exit 2), checked at start even on a run
# that would never read them; an empty switch counts as unset.
for sw in ENGINE_INT8_PATH=vnni9 ENGINE_CUDNN_LOG=yes; do
  err=$(env "$sw" "$trainer" --device cpu --synthetic --synthetic-size 100 --max-steps 1 2>&1 >/dev/null); rc=$?
  if [ "$rc" = 2 ] && [ "$(wc -l <<<"$err")" = 1 ] && grep -q "^error: ${sw%%=*} must be" <<<"$err"; then
    pass "$sw -> exit 2, one line"
  else fail "$sw -> exit $rc: $err"; fi
done
if ENGINE_CPU_ISA= ENGINE_INT8_PATH= ENGINE_CUDNN_LOG= "$trainer" --version >/dev/null 2>&1; then
  pass "empty environment switches count as unset"
else fail "empty environment switches refused"; fi
# --deterministic is accepted (a no-op on the CPU, which repeats bit for bit anyway).
if "$trainer" --device cpu --synthetic --synthetic-size 100 --batch-size 50 --max-steps 1 --deterministic --threads 2 \
     >/dev/null 2>&1; then pass "--deterministic runs"; else fail "--deterministic"; fi

# Gradient clipping: the log line and the JSON log carry the (pre-clipping) global norm.
out=$("$trainer" --device cpu --synthetic --synthetic-size 300 --batch-size 64 --max-steps 2 --log-every 1 \
      --clip-grad-norm 0.01 --threads 2 --log "$work/clip.jsonl" 2>/dev/null)
if grep -q "Grad norm: [0-9]" <<<"$out" && grep -q '"grad_norm":[0-9]' "$work/clip.jsonl"; then
  pass "--clip-grad-norm logs the gradient norm"
else
  fail "--clip-grad-norm: no grad norm in the output or log: $out"
fi

# Bit-identical resume: 14 steps straight vs 5 steps, stop, resume to 14 (crossing an epoch
# boundary, with dropout and augmentation in play).
common=(--device cpu --synthetic --synthetic-size 600 --batch-size 64 --epochs 3 --augment --seed 7 --log-every 1000 --threads 2)
"$trainer" "${common[@]}" --max-steps 14 --checkpoint "$work/straight.ckpt" >/dev/null 2>&1 || fail "straight run"
"$trainer" "${common[@]}" --max-steps 5 --checkpoint "$work/part.ckpt" >/dev/null 2>&1 || fail "first half"
"$trainer" "${common[@]}" --max-steps 14 --resume "$work/part.ckpt" --checkpoint "$work/resumed.ckpt" >/dev/null 2>&1 || fail "resumed half"
if cmp -s "$work/straight.ckpt" "$work/resumed.ckpt"; then pass "resume is bit-identical"; else fail "resumed checkpoint differs"; fi

# Gradient accumulation: 3 micro-batches per step (600 images: 10 micro-batches, so 4 steps an
# epoch, the last of one micro-batch); stopped at step 3 and resumed it equals a straight run,
# and a checkpoint of another K is refused.
acc=(--device cpu --synthetic --synthetic-size 600 --batch-size 64 --accumulate 3 --epochs 2 --seed 7 --log-every 1000
     --threads 2)
out=$("$trainer" "${acc[@]}" --checkpoint "$work/acc_straight.ckpt" 2>&1) || fail "accumulate straight run"
if grep -q "effective batch 192" <<<"$out" && grep -q "Step \[4/4\]" <<<"$out"; then pass "--accumulate 3: 4 steps an epoch"
else fail "--accumulate 3 output: $out"; fi
"$trainer" "${acc[@]}" --max-steps 3 --checkpoint "$work/acc_part.ckpt" >/dev/null 2>&1 || fail "accumulate first half"
"$trainer" "${acc[@]}" --resume "$work/acc_part.ckpt" --checkpoint "$work/acc_resumed.ckpt" >/dev/null 2>&1 ||
  fail "accumulate resumed half"
if cmp -s "$work/acc_straight.ckpt" "$work/acc_resumed.ckpt"; then pass "--accumulate resume is bit-identical"
else fail "--accumulate resumed checkpoint differs"; fi
expect 1 "was trained with --accumulate 3, not 2" -- "${acc[@]}" --accumulate 2 --resume "$work/acc_part.ckpt"
expect 1 "was trained with --batch-size 64, not 32" -- "${acc[@]}" --batch-size 32 --resume "$work/acc_part.ckpt"
expect 2 "--accumulate expects an integer >= 1" -- --accumulate 0

# 8-bit optimizer state: the quantised moments are in the checkpoint, so a resume is exact;
# another format is refused.
q8=(--device cpu --synthetic --synthetic-size 300 --batch-size 64 --epochs 2 --optimizer-state int8 --seed 3
    --log-every 1000 --threads 2)
"$trainer" "${q8[@]}" --checkpoint "$work/q8_straight.ckpt" >/dev/null 2>&1 || fail "int8 straight run"
"$trainer" "${q8[@]}" --max-steps 3 --checkpoint "$work/q8_part.ckpt" >/dev/null 2>&1 || fail "int8 first half"
"$trainer" "${q8[@]}" --resume "$work/q8_part.ckpt" --checkpoint "$work/q8_resumed.ckpt" >/dev/null 2>&1 ||
  fail "int8 resumed half"
if cmp -s "$work/q8_straight.ckpt" "$work/q8_resumed.ckpt"; then pass "--optimizer-state int8 resume is bit-identical"
else fail "--optimizer-state int8 resumed checkpoint differs"; fi
expect 1 "optimizer state is int8, not fp32" -- "${q8[@]}" --optimizer-state fp32 --resume "$work/q8_part.ckpt"
expect 2 "--optimizer-state must be one of fp32, bf16, int8" -- --optimizer-state int4

# A truncated or altered checkpoint is refused.
head -c 1000 "$work/straight.ckpt" >"$work/truncated.ckpt"
expect 1 "truncated" -- "${common[@]}" --resume "$work/truncated.ckpt"
cp "$work/straight.ckpt" "$work/altered.ckpt"
printf '\x55' | dd of="$work/altered.ckpt" bs=1 seek=5000 conv=notrunc status=none
expect 1 "checksum mismatch" -- "${common[@]}" --resume "$work/altered.ckpt"
expect 1 "holds a simplecnn, not a resnet9" -- "${common[@]}" --model resnet9 --resume "$work/straight.ckpt"
if "$trainer" "${common[@]}" --eval-only --resume "$work/straight.ckpt" 2>/dev/null | grep -q "test loss"; then pass "--eval-only"; else fail "--eval-only"; fi

# Seeing the numbers: the report's table and JSON lines, anomaly mode, FP32 layers.
small=(--device cpu --synthetic --synthetic-size 300 --batch-size 64 --threads 2)
expect 2 "--inspect-numerics expects an integer >= 1" -- "${small[@]}" --inspect-numerics 0
expect 2 "--detect-anomaly takes no value or =strict, got 'yes'" -- "${small[@]}" --detect-anomaly=yes
expect 2 "simplecnn has no layer 'fc9' (its layers: conv1, 1, 2, conv2, 4, 5, 6, fc1, 8, 9, fc2)" -- "${small[@]}" --fp32-layers fc9
out=$("$trainer" "${small[@]}" --max-steps 3 --inspect-numerics 2 --log "$work/numerics.jsonl" 2>/dev/null)
n=$(grep -c '"event":"numerics"' "$work/numerics.jsonl")
# Steps 1 and 3 are inspected: 11 layer outputs + 8 gradients each.
if [ "$(grep -c '^numerics at step' <<<"$out")" = 2 ] && [ "$n" = 38 ] &&
   grep -q '"layer":"fc1.weight","kind":"gradient","dtype":"f16"' "$work/numerics.jsonl"; then
  pass "--inspect-numerics 2: two reports, 38 JSON rows"
else
  fail "--inspect-numerics: $(grep -c '^numerics at step' <<<"$out") reports, $n rows"
fi
out=$("$trainer" "${small[@]}" --max-steps 1 --fp32-layers fc1 --inspect-numerics 1 2>/dev/null)
if grep -qE '^  fc1 +Linear +f32' <<<"$out" && grep -qE '^  conv2 +Conv2d +f16' <<<"$out"; then
  pass "--fp32-layers fc1: fc1 runs in f32, conv2 in f16"
else
  fail "--fp32-layers fc1: $out"
fi
expect 1 "anomaly: step 1: cast backward in layer (outside the model) produced 0 NaN and 640 inf" -- \
  "${small[@]}" --max-steps 2 --detect-anomaly=strict --init-scale 1e30 --checkpoint "$work/anomaly.ckpt"
[ ! -e "$work/anomaly.ckpt" ] && pass "an anomaly writes no checkpoint" || fail "anomaly.ckpt was written"
err=$("$trainer" "${small[@]}" --max-steps 2 --detect-anomaly --init-scale 1e30 2>&1 >/dev/null); rc=$?
if [ "$rc" = 0 ] && [ "$(grep -c '^note: anomaly mode: step' <<<"$err")" = 2 ]; then pass "--detect-anomaly: scaler overflows are notes"
else fail "--detect-anomaly without strict -> exit $rc: $err"; fi

# BF16 on the CPU's BF16 unit (AMX or AVX512-BF16 where present, the widened FP32 kernels
# elsewhere), with resnet9 (flat and column routes, fused stores): stopped and resumed it equals a
# straight run across an epoch boundary, and 1 and 2 threads give the same bits.
bf16=(--device cpu --model resnet9 --precision bf16 --synthetic --synthetic-size 96 --batch-size 16 --epochs 2 --seed 3
      --log-every 1000)
"$trainer" "${bf16[@]}" --threads 2 --max-steps 8 --checkpoint "$work/bf16_straight.ckpt" >"$work/bf16_straight.out" 2>&1 ||
  fail "bf16 straight run: $(tail -2 "$work/bf16_straight.out")"
"$trainer" "${bf16[@]}" --threads 2 --max-steps 3 --checkpoint "$work/bf16_part.ckpt" >/dev/null 2>&1 || fail "bf16 first half"
"$trainer" "${bf16[@]}" --threads 2 --max-steps 8 --resume "$work/bf16_part.ckpt" --checkpoint "$work/bf16_resumed.ckpt" \
  >/dev/null 2>&1 || fail "bf16 resumed half"
unit=$(grep -o "BF16 matrix products on .*" "$work/bf16_straight.out")
if cmp -s "$work/bf16_straight.ckpt" "$work/bf16_resumed.ckpt"; then pass "resnet9 bf16 resume is bit-identical ($unit)"
else fail "resnet9 bf16 resumed checkpoint differs ($unit)"; fi
"$trainer" "${bf16[@]}" --threads 1 --max-steps 8 --checkpoint "$work/bf16_one_thread.ckpt" >/dev/null 2>&1 ||
  fail "bf16 one-thread run"
if cmp -s "$work/bf16_straight.ckpt" "$work/bf16_one_thread.ckpt"; then pass "resnet9 bf16: 1 and 2 threads, same bits ($unit)"
else fail "resnet9 bf16: 1 and 2 threads differ ($unit)"; fi
# The unit in use is named; a capped ISA widens; FP16 where a BF16 unit exists says so.
out=$(ENGINE_CPU_ISA=avx512 "$trainer" "${bf16[@]}" --max-steps 1 2>/dev/null)
# (the ISA named is avx512 or, on a CPU without AVX-512, the lower one the cap leaves)
if grep -q "BF16 matrix products on the FP32 units, widened (no BF16 unit in use; ISA \(avx512\|avx2\|generic\))" <<<"$out"; then
  pass "ENGINE_CPU_ISA=avx512: BF16 runs widened, and says so"
else fail "ENGINE_CPU_ISA=avx512 --precision bf16: $out"; fi
if "$trainer" --version | grep -qE "^CPU ISA: (amx|avx512_bf16) for"; then
  out=$("$trainer" --device cpu --synthetic --synthetic-size 100 --batch-size 16 --max-steps 1 2>/dev/null)
  if grep -q "note: FP16 runs widened to FP32 on this CPU (no FP16 matrix unit); its .* unit multiplies BF16" <<<"$out"; then
    pass "--precision fp16 on a CPU with a BF16 unit: one line says so"
  else fail "--precision fp16 with a BF16 unit: no note in: $out"; fi
else
  echo "skipped: the FP16 note needs a CPU with a BF16 unit ($("$trainer" --version | grep '^CPU ISA'))"
fi

# The airbench94 recipe, small: its pieces (whitening from the data, the frozen-after bias,
# parameter groups, the summed loss, reflect-padded crops, alternating flips, the weight
# average, TTA) and a resume in the middle of it, bit for bit: the checkpoint carries the
# average, and --max-steps stops without shortening the schedules. 600 images at batch 64, the
# last batch dropped: 9 steps an epoch, 14 in all (1.5 epochs); the bias trains for 5 steps.
ab=(--recipe airbench94 --device cpu --synthetic --synthetic-size 600 --batch-size 64 --epochs 1.5 --precision bf16
    --freeze-after 0.bias=0.5 --ema-every 2 --whiten-images 100 --seed 5 --log-every 1000 --threads 2)
out=$("$trainer" "${ab[@]}" --checkpoint "$work/ab_straight.ckpt" --log "$work/ab.jsonl" 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "^TTA accuracy [0-9.]*% in [0-9.]* s (whitening" <<<"$out" &&
   grep -q "batch 64, 9 steps per epoch, optimizer sgd" <<<"$out" &&
   grep -q '"event":"tta"' "$work/ab.jsonl"; then
  pass "--recipe airbench94: trains, says TTA accuracy and time, logs it"
else fail "--recipe airbench94: exit $rc: $(tail -5 <<<"$out")"; fi
"$trainer" "${ab[@]}" --max-steps 5 --checkpoint "$work/ab_part.ckpt" >/dev/null 2>&1 || fail "airbench94 first part"
"$trainer" "${ab[@]}" --resume "$work/ab_part.ckpt" --checkpoint "$work/ab_resumed.ckpt" >/dev/null 2>&1 ||
  fail "airbench94 resumed part"
if cmp -s "$work/ab_straight.ckpt" "$work/ab_resumed.ckpt"; then pass "--recipe airbench94 resume is bit-identical"
else fail "--recipe airbench94: the resumed checkpoint differs"; fi
# A checkpoint with the average resumed by a run without it (the classic recipe) is refused.
expect 1 "was trained with --ema; resume it with --ema" -- --model airbench94 --device cpu --synthetic \
  --synthetic-size 600 --batch-size 64 --optimizer sgd --resume "$work/ab_part.ckpt"
expect 2 "--freeze-after: airbench94's parameter '0.weight' is frozen already" -- "${ab[@]}" --freeze-after 0.weight=1 --max-steps 1
# The recipe's ablations: the first layer learned (no whitening sample, no whitening time).
out=$("$trainer" --recipe airbench94 --device cpu --synthetic --synthetic-size 600 --batch-size 64 --precision bf16 \
  --seed 5 --threads 2 --no-whiten --no-dirac --max-steps 2 2>&1); rc=$?
if [ "$rc" = 0 ] && grep -q "^--no-whiten: the first layer learns from its default init" <<<"$out" &&
   grep -q "(whitening 0.0 s" <<<"$out"; then pass "--no-whiten --no-dirac: the ablated recipe trains"
else fail "--no-whiten --no-dirac: exit $rc: $(tail -3 <<<"$out")"; fi
expect 2 "--no-dirac applies to --model airbench94 only" -- --no-dirac
# Each flag overrides the recipe's value wherever it stands.
out=$("$trainer" --momentum 0.5 "${ab[@]}" --max-steps 1 --lr 0.25 2>&1)
if grep -q "optimizer sgd lr 0.25" <<<"$out"; then pass "a flag overrides the recipe's value"
else fail "--lr after --recipe: $(grep optimizer <<<"$out")"; fi

echo "$passes passed, $fails failed"
[ "$fails" = 0 ]

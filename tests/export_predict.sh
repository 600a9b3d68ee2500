#!/usr/bin/env bash
# Train -> export -> predict, end to end, checked independently: the exported safetensors file
# parses with the `safetensors` package under PyTorch's names; a float64 numpy forward in
# PyTorch's layout (and PyTorch itself, where importable) gives our logits; predict over the
# test folders reproduces the trainer's test accuracy; bad input fails with one clear line.
#   tests/export_predict.sh BUILD_DIR WORKDIR   (TORCH_PYTHON: a python with PyTorch [python3])
set -uo pipefail
build="$1"
work="$2"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
check="$src/tests/export_check.py"
torch_python="${TORCH_PYTHON:-python3}"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fails=0
skips=0
# run_check NAME CMD...: a python check; exit 77 means skipped (said, not failed).
run_check() {
  local name="$1" out rc
  shift
  out=$("$@" 2>&1)
  rc=$?
  echo "$out" | sed 's/^/  /'
  if [ $rc = 0 ]; then pass "$name"; elif [ $rc = 77 ]; then echo "skipped: $name"; skips=$((skips + 1)); else fail "$name"; fi
}
source "$src/tests/cli_checks.sh"  # pass, fail, expect

python3 "$check" make-data data || { echo "FAILED: make-data"; exit 1; }
trainer="$build/trainer"
# The CPU: the numeric checks' bounds are derived for FP32 dot products in any order, which
# covers our CPU kernels (cuDNN may pick Winograd or FFT algorithms, with other error terms).
common=(--data data --cache cache --batch-size 50 --threads 2 --device cpu)
predict() { "$build/predict" --device cpu --threads 2 "$@"; }

# Train simplecnn in FP16 (3 epochs of 300 images), then the trainer's own accuracies.
"$trainer" "${common[@]}" --epochs 3 --precision fp16 --checkpoint ck.bin >train.log 2>&1 || { cat train.log; exit 1; }
eval_line=$("$trainer" "${common[@]}" --precision fp16 --resume ck.bin --eval-only 2>/dev/null | grep '^test loss')
acc16=$(sed -nE 's/.*accuracy ([0-9.]+)% \(fp16\).*/\1/p' <<<"$eval_line")
acc32=$(sed -nE 's/.*FP32 inference ([0-9.]+)%.*/\1/p' <<<"$eval_line")
[ -n "$acc16" ] && [ -n "$acc32" ] || { echo "FAILED: no accuracies from trainer --eval-only: '$eval_line'"; exit 1; }
echo "trainer --eval-only: $eval_line"

"$trainer" --resume ck.bin --export model.safetensors >/dev/null || fail "export"
"$trainer" --resume ck.bin --export model16.safetensors --export-dtype fp16 >/dev/null || fail "export fp16"

# predict over the test folders: the trainer's accuracy, to the image.
accuracy_of() { predict --batch-size 50 "$@" | sed -nE 's/^accuracy ([0-9.]+)%.*/\1/p'; }
got=$(accuracy_of --weights model.safetensors data/test)
[ -n "$got" ] && [ "$got" = "$acc32" ] && pass "predict fp32 (safetensors) accuracy $got% = trainer's FP32 $acc32%" ||
  fail "predict fp32 accuracy '$got' vs trainer's '$acc32'"
got=$(accuracy_of --weights ck.bin --precision fp16 data/test)
[ -n "$got" ] && [ "$got" = "$acc16" ] && pass "predict fp16 (checkpoint) accuracy $got% = trainer's FP16 $acc16%" ||
  fail "predict fp16 accuracy '$got' vs trainer's '$acc16'"
got=$(accuracy_of --weights model.safetensors --precision fp16 data/test)
[ -n "$got" ] && [ "$got" = "$acc16" ] && pass "predict fp16 (safetensors) accuracy $got%" || fail "predict fp16 safetensors '$got' vs '$acc16'"
# Test-time augmentation: predict --tta over the folders equals the trainer's --eval-only --tta.
tta_line=$("$trainer" "${common[@]}" --precision fp16 --resume ck.bin --eval-only --tta 2>/dev/null | grep '^test loss')
tta32=$(sed -nE 's/.*FP32 inference ([0-9.]+)%.*/\1/p' <<<"$tta_line")
got=$(accuracy_of --weights model.safetensors --tta data/test)
[ -n "$got" ] && [ "$got" = "$tta32" ] && pass "predict --tta accuracy $got% = trainer's --eval-only --tta $tta32%" ||
  fail "predict --tta accuracy '$got' vs trainer's '$tta32' ($tta_line)"
expect 2 "--tta is for fp32, fp16 and bf16 inference, not int8" -- "$build/predict" --weights model.safetensors --tta --precision int8 data/test

# The file, read by others.
run_check "safetensors package reads PyTorch's names and shapes" python3 "$check" check-names model.safetensors simplecnn float32
run_check "fp16 export too" python3 "$check" check-names model16.safetensors simplecnn float16
predict --weights model.safetensors --json data/test >pred.jsonl || fail "predict --json"
run_check "numpy forward in PyTorch's layout gives our logits" python3 "$check" check-numpy model.safetensors pred.jsonl
run_check "PyTorch simplecnn gives our logits" "$torch_python" "$check" check-torch model.safetensors simplecnn pred.jsonl
for m in resnet9 resnet18; do
  "$trainer" "${common[@]}" --model $m --precision fp32 --max-steps 2 --batch-size 20 --checkpoint $m.bin >/dev/null 2>&1 &&
    "$trainer" --resume $m.bin --export $m.safetensors >/dev/null &&
    predict --weights $m.safetensors --json data/test/cat data/test/ship >$m.jsonl || fail "$m export/predict"
  run_check "safetensors names for $m" python3 "$check" check-names $m.safetensors $m float32
  run_check "PyTorch $m gives our logits" "$torch_python" "$check" check-torch $m.safetensors $m $m.jsonl
done
n=$(predict --weights resnet9.safetensors --fold-bn data/test/cat | sed -nE 's/.*, ([0-9]+) batch-norms folded$/\1/p')
[ "$n" = 8 ] && pass "predict --fold-bn folds resnet9's 8 batch-norms" || fail "predict --fold-bn: '$n' folded"

# --resize: a 2x enlargement halves back to the original pixels, so the logits are the same.
predict --weights model.safetensors --json data/small.png | sed 's/"image":"[^"]*"//' >small.json
predict --weights model.safetensors --json --resize data/big.png | sed 's/"image":"[^"]*"//' >big.json
cmp -s small.json big.json && [ -s small.json ] && pass "--resize: bilinear halving of a 2x enlargement" ||
  fail "--resize: $(cat small.json big.json)"

# Bad input: one clear line, non-zero exit, nothing half-done.
expect 1 "is 64x64; the models take 32x32" -- "$build/predict" --weights model.safetensors data/big.png
expect 2 "--weights FILE is required" -- "$build/predict" data/small.png
expect 2 "unknown option '--bogus'" -- "$build/predict" --weights model.safetensors --bogus data/small.png
expect 2 "--precision must be one of" -- "$build/predict" --weights model.safetensors --precision fp8 data/small.png
expect 2 "--top-k 11 is more than the model's 10 classes" -- "$build/predict" --weights model.safetensors --top-k 11 data/small.png
expect 2 "--top-k expects an integer >= 1, got '0'" -- "$build/predict" --weights model.safetensors --top-k 0 data/small.png
expect 1 "no such image or folder" -- "$build/predict" --weights model.safetensors nothing.png
expect 1 "holds a simplecnn, not a resnet9" -- "$build/predict" --model resnet9 --weights model.safetensors data/small.png
head -c 100 model.safetensors >truncated.safetensors
expect 1 "truncated.safetensors is not a valid safetensors file: header length" -- "$build/predict" --weights truncated.safetensors data/small.png
expect 1 "holds a resnet9, not a simplecnn (use --model resnet9)" -- "$trainer" --synthetic --max-steps 1 --init-from resnet9.safetensors
expect 1 "holds a resnet18, not a simplecnn" -- "$trainer" --synthetic --max-steps 1 --init-from resnet18.safetensors --model simplecnn
expect 2 "--export needs --resume" -- "$trainer" --export x.safetensors
expect 2 "--init-from starts a new run" -- "$trainer" --resume ck.bin --init-from model.safetensors
expect 2 "--export-dtype must be one of" -- "$trainer" --resume ck.bin --export x.safetensors --export-dtype fp8
expect 2 "must not overwrite the checkpoint" -- "$trainer" --resume ck.bin --export ck.bin
# Failures after the start leave no file behind: a corrupt checkpoint, an unwritable place.
head -c 1000 ck.bin >corrupt.bin
expect 1 "corrupt.bin is truncated" -- "$trainer" --resume corrupt.bin --export x.safetensors
expect 1 "cannot write safetensors file nowhere/x.safetensors.tmp" -- "$trainer" --resume ck.bin --export nowhere/x.safetensors
[ ! -e x.safetensors ] && [ ! -e x.safetensors.tmp ] && [ ! -e nowhere ] && pass "no file left by a failed export" ||
  fail "a failed export left $(ls x.safetensors* nowhere 2>&1)"

echo "export_predict: $fails failed, $skips skipped"
[ $fails = 0 ]

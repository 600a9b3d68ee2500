#!/usr/bin/env bash
# The CPU build under AddressSanitizer + UndefinedBehaviorSanitizer (GCC, -O1): every unit
# test, then a short trainer run (FP16 with the loss scaler, saved, stopped by SIGTERM,
# resumed, exported, also in INT8) and predict on its exports. Any report fails: ASan's and LeakSanitizer's
# end the process, UBSan's too (halt_on_error). MPI stays out of this build: Open MPI's own
# start-up allocations are reported as leaks by the hundred, which would bury ours.
#   bash tests/sanitizers/run.sh [BUILD_DIR]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build-asan}"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
  -DENGINE_CUDA=OFF -DENGINE_MPI=OFF -DENGINE_SANITIZE=address,undefined >/dev/null
cmake --build "$build" --parallel "$(nproc)" --target engine_tests trainer predict

export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizers/ubsan.supp"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp"
t0=$SECONDS
echo "== unit tests under ASan + UBSan"
# All but the page-fault count: ASan's shadow memory and quarantine fault pages of their own.
"$build/engine_tests" --order lex "~CPU training steps 10 to 20 cause no page faults*"
echo "unit tests: $((SECONDS - t0)) s"

t1=$SECONDS
work="$build/sanitizer-run"
rm -rf "$work" && mkdir -p "$work"
trainer=("$build/trainer" --device cpu --synthetic --synthetic-size 640 --batch-size 64 --epochs 2 --augment --threads 2
         --log-every 5)
echo "== trainer: FP16, checkpointed, stopped by SIGTERM, resumed, exported; predict"
"${trainer[@]}" --precision fp16 --checkpoint "$work/a.ckpt" --log "$work/a.jsonl" >"$work/a.log" 2>&1 &
pid=$!
for _ in $(seq 600); do grep -q "Epoch \[1/2\], Step \[5/" "$work/a.log" 2>/dev/null && break; sleep 0.1; done
kill -TERM $pid 2>/dev/null || true  # (if it already ended, the status below says how)
rc=0; wait $pid || rc=$?
if [ $rc != 143 ]; then echo "FAILED: the stopped run exited $rc"; cat "$work/a.log"; exit 1; fi
"${trainer[@]}" --precision fp16 --checkpoint "$work/a.ckpt" --resume "$work/a.ckpt" >"$work/b.log" 2>&1 ||
  { echo "FAILED: the resumed run"; cat "$work/b.log"; exit 1; }
"$build/trainer" --resume "$work/a.ckpt" --export "$work/a.safetensors" >/dev/null
mkdir -p "$work/images"
cp "$root/tests/fuzz/corpus/image/rgb32.png" "$root/tests/fuzz/corpus/image/rgb32.jpg" "$work/images/"
"$build/predict" --weights "$work/a.safetensors" --precision bf16 "$work/images" >"$work/predict.log" 2>&1 ||
  { echo "FAILED: predict"; cat "$work/predict.log"; exit 1; }
# INT8: export calibrated on 64 synthetic images, predict with the file and quantized on the fly.
"$build/trainer" --resume "$work/a.ckpt" --export "$work/a.int8.safetensors" --export-dtype int8 --calibrate 64 \
  --synthetic --synthetic-size 640 --threads 2 >"$work/int8.log" 2>&1 ||
  { echo "FAILED: the INT8 export"; cat "$work/int8.log"; exit 1; }
"$build/predict" --weights "$work/a.int8.safetensors" "$work/images" >>"$work/int8.log" 2>&1 &&
  "$build/predict" --weights "$work/a.safetensors" --precision int8 --calibrate 2 --calibration-data "$work/images" \
    "$work/images" >>"$work/int8.log" 2>&1 ||
  { echo "FAILED: INT8 predict"; cat "$work/int8.log"; exit 1; }
"${trainer[@]}" --precision bf16 --model resnet9 --synthetic-size 128 --batch-size 32 --epochs 1 >"$work/c.log" 2>&1 ||
  { echo "FAILED: the BF16 resnet9 run"; cat "$work/c.log"; exit 1; }
echo "trainer and predict runs: $((SECONDS - t1)) s; no sanitizer reports"

#!/usr/bin/env bash
# Configuration without cuDNN: with ENGINE_CUDA=ON it must stop with one clear line naming
# CUDNN_ROOT; with AUTO it must warn and configure the CPU backend only.
# Usage: tests/cmake_no_cudnn.sh SOURCE_DIR WORK_DIR
set -uo pipefail
src="$1" work="$2"
rm -rf "$work" && mkdir -p "$work"
no_cudnn=(-DCUDNN_INCLUDE_DIR="$work/none/include" -DCUDNN_LIBRARY="$work/none/lib/libcudnn.so.9" -DENGINE_TESTS=OFF)
fail=0

rc=0
cmake -S "$src" -B "$work/on" -DENGINE_CUDA=ON "${no_cudnn[@]}" > "$work/on.log" 2>&1 || rc=$?
if [ "$rc" = 0 ]; then echo "FAIL: ENGINE_CUDA=ON without cuDNN configured successfully"; fail=1
elif ! grep -q "ENGINE_CUDA=ON but cuDNN 9 was not found" "$work/on.log" || ! grep -q "CUDNN_ROOT" "$work/on.log"; then
  echo "FAIL: ENGINE_CUDA=ON without cuDNN failed without the expected message:"; tail -20 "$work/on.log"; fail=1
else echo "ok: ENGINE_CUDA=ON without cuDNN stops: $(grep -m1 'cuDNN 9 was not found' "$work/on.log" | sed 's/^ *//')"; fi

rc=0
cmake -S "$src" -B "$work/auto" -DENGINE_CUDA=AUTO "${no_cudnn[@]}" > "$work/auto.log" 2>&1 || rc=$?
if [ "$rc" != 0 ]; then echo "FAIL: ENGINE_CUDA=AUTO without cuDNN did not configure:"; tail -20 "$work/auto.log"; fail=1
elif ! grep -q "CUDA backend: OFF" "$work/auto.log" || ! grep -q "building the CPU backend only" "$work/auto.log"; then
  echo "FAIL: ENGINE_CUDA=AUTO without cuDNN did not fall back to the CPU backend with a warning"; fail=1
else echo "ok: ENGINE_CUDA=AUTO without cuDNN configures the CPU backend only, with a warning"; fi
exit $fail

#!/usr/bin/env bash
# shellcheck disable=SC2317  # the section functions are called through "$s" (indirectly)
# bench/gpu_check.sh: the ONE script to run on the GPU (H200) machine. It builds the engine
# with the CUDA backend for sm_90, runs the whole CTest suite (the [cuda] tests verbosely),
# trains the default recipe in fp32/fp16/bf16, runs the PyTorch side-by-side, the kernel and
# training benchmarks and a short ResNet side-by-side, runs compute-sanitizer over the small
# [cuda][sanitize] tests, and prints the comparison tables and one short summary table last.
# Exit status 0 only when every section passed. Budget: under 8 minutes; the later sections
# shrink (quick benchmarks) or skip themselves, saying so, when time runs short.
#
#   bash bench/gpu_check.sh             on the GPU machine, from anywhere in the checkout
#   bash bench/gpu_check.sh --prepare   on the development machine, BEFORE the GPU call:
#                                       copies the header-only build dependencies the GPU
#                                       image lacks (Catch2 v2, stb_image) into .gpu_deps/,
#                                       which must travel with the working tree (untracked
#                                       files do; if .gpu_deps is git-ignored, carry it)
#
# Environment knobs: GPU_CHECK_BUILD (build dir, default build-gpu), GPU_CHECK_BUDGET
# (seconds, default 460), GPU_CHECK_ONLY (e.g. "tests bench": only those sections after the
# build; names: tests train pytorch bench resnet sanitizer), GPU_CHECK_CTEST_EXCLUDE (ctest -E
# regex for the CPU suite),
# GPU_CHECK_COMMIT (the commit to report when the copy there has no .git),
# CUDNN_ROOT (skip the search), OUT (a folder whose files come back from the GPU machine:
# the logs are copied there).
#
# The GPU image has nvcc, CMake, ninja and PyTorch; cuDNN and cuBLAS may live only in
# PyTorch's nvidia-* pip packages, found here through python3 and handed to CMake as hints.
# Nothing is downloaded. Each section is a function named in SECTIONS below; its verdict lands
# in the summary table.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${GPU_CHECK_BUILD:-$ROOT/build-gpu}"
DEPS="$ROOT/.gpu_deps"
BUDGET="${GPU_CHECK_BUDGET:-460}"
START=$(date +%s)
DEADLINE=$((START + BUDGET))
LOGDIR="$BUILD/gpu_check_logs"

# ---- --prepare (development machine) ---------------------------------------------------------
if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$DEPS/include/catch2" "$DEPS/include/stb"
  ok=1
  for pair in "/usr/include/catch2/catch.hpp:$DEPS/include/catch2/catch.hpp" \
              "/usr/include/stb/stb_image.h:$DEPS/include/stb/stb_image.h"; do
    src="${pair%%:*}" dst="${pair#*:}"
    if [ -f "$src" ]; then cp "$src" "$dst" && echo "copied $src -> ${dst#"$ROOT"/}"
    else echo "missing $src (install catch2 / libstb-dev here first)" >&2; ok=0; fi
  done
  # The CIFAR-10 archive for the training section (about 20 MB; the call carries .gpu_deps).
  archive="$ROOT/../shared/data/cifar10-jpeg.tar.gz"
  if [ -f "$archive" ]; then cp "$archive" "$DEPS/" && echo "copied $archive -> .gpu_deps/"
  else echo "note: no $archive; the training section will use synthetic data"; fi
  [ "$ok" = 1 ] || exit 1
  du -sh "$DEPS"
  exit 0
fi

# ---- helpers ---------------------------------------------------------------------------------
SUMMARY=()   # "name|verdict|detail" rows
FAILED=0
say() { printf '\n== [%4d s] %s\n' "$(( $(date +%s) - START ))" "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
record() {  # record NAME VERDICT DETAIL; any verdict other than ok/skipped fails the run
  SUMMARY+=("$1|$2|$3")
  case "$2" in ok|skipped) ;; *) FAILED=1 ;; esac
}
# Runs a command with the time left (minus a reserve for the sections after it).
run_limited() {  # run_limited RESERVE_SECONDS cmd...
  local reserve="$1"; shift
  local t=$(( $(left) - reserve ))
  if [ "$t" -lt 10 ]; then echo "(no time left for: $*)"; return 124; fi
  timeout --kill-after=10 "$t" "$@"
}
mkdir -p "$LOGDIR"

# ---- sections --------------------------------------------------------------------------------
CMAKE_HINTS=()
EXTRA_INC=()

section_env() {
  say "environment"
  local gpu
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  echo "GPU:   ${gpu:-none visible to nvidia-smi}"
  NVCC="$(command -v nvcc || true)"
  [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
  if [ -z "$NVCC" ]; then record env FAILED "no nvcc"; return 1; fi
  echo "nvcc:  $NVCC ($("$NVCC" --version | grep -o 'release [0-9.]*' || true))"
  echo "cmake: $(cmake --version | head -1), ninja $(ninja --version 2>/dev/null || echo missing), $(nproc) cores"
  CUDA_HOME_GUESS="$(cd "$(dirname "$NVCC")/.." && pwd)"
  CMAKE_HINTS+=("-DCMAKE_CUDA_COMPILER=$NVCC")

  # Where the toolkit lacks cuDNN or cuBLASLt, take them from the nvidia-* pip packages
  # (namespace packages: walk nvidia.__path__, __file__ may be None).
  local py_out
  py_out=$(python3 - <<'PY' 2>/dev/null
import os
try:
    import nvidia
    roots = list(nvidia.__path__)
except Exception:
    roots = []
found = {}
for r in roots:
    for dp, dn, fn in os.walk(r):
        if dp[len(r):].count(os.sep) > 3:
            dn[:] = []
            continue
        for f in fn:
            if f == "cudnn.h": found.setdefault("cudnn_inc", dp)
            elif f == "cublasLt.h": found.setdefault("cublaslt_inc", dp)
            elif f.startswith("libcudnn.so"): found.setdefault("cudnn_lib", dp)
            elif f.startswith("libcublasLt.so"): found.setdefault("cublaslt_lib", os.path.join(dp, f))
for k, v in found.items():
    print(f"{k}={v}")
PY
)
  local cudnn_inc="" cudnn_lib="" cublaslt_inc="" cublaslt_lib="" line
  while IFS= read -r line; do
    case "$line" in
      cudnn_inc=*) cudnn_inc="${line#*=}" ;;
      cudnn_lib=*) cudnn_lib="${line#*=}" ;;
      cublaslt_inc=*) cublaslt_inc="${line#*=}" ;;
      cublaslt_lib=*) cublaslt_lib="${line#*=}" ;;
    esac
  done <<< "$py_out"

  local have_cudnn=no
  if [ -n "${CUDNN_ROOT:-}" ]; then
    CMAKE_HINTS+=("-DCUDNN_ROOT=$CUDNN_ROOT"); have_cudnn="CUDNN_ROOT=$CUDNN_ROOT"
  elif [ -f "$CUDA_HOME_GUESS/include/cudnn.h" ]; then
    have_cudnn="toolkit"
  elif [ -n "$cudnn_inc" ]; then
    CMAKE_HINTS+=("-DCUDNN_ROOT=$(dirname "$cudnn_inc")" "-DCUDNN_INCLUDE_DIR=$cudnn_inc")
    local lib
    for lib in "$cudnn_lib"/libcudnn.so*; do
      [ -e "$lib" ] && { CMAKE_HINTS+=("-DCUDNN_LIBRARY=$lib"); break; }
    done
    have_cudnn="pip: $(dirname "$cudnn_inc")"
  fi
  echo "cuDNN: $have_cudnn"
  if ls "$CUDA_HOME_GUESS"/lib*/libcublasLt.so* >/dev/null 2>&1; then
    echo "cuBLASLt: toolkit"
  elif [ -n "$cublaslt_lib" ]; then
    CMAKE_HINTS+=("-DCUDA_cublasLt_LIBRARY=$cublaslt_lib")
    echo "cuBLASLt: pip: $cublaslt_lib"
  else
    echo "cuBLASLt: not found"
  fi
  if [ ! -f "$CUDA_HOME_GUESS/include/cublasLt.h" ] && [ -n "$cublaslt_inc" ]; then EXTRA_INC+=("$cublaslt_inc"); fi
  # Run time: the pip libraries are not on the loader's path (and libcudnn loads its
  # sub-libraries by name).
  local d
  for d in "$cudnn_lib" "$(dirname "${cublaslt_lib:-/nonexistent/x}")"; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  done

  # Header-only test/build dependencies: the system's, else the copies --prepare made.
  if [ ! -f /usr/include/catch2/catch.hpp ] && ! cmake --find-package -DNAME=Catch2 -DCOMPILER_ID=GNU \
       -DLANGUAGE=CXX -DMODE=EXIST >/dev/null 2>&1; then
    if [ -f "$DEPS/include/catch2/catch.hpp" ]; then
      write_catch2_shim "$BUILD/_catch2"
      CMAKE_HINTS+=("-DCatch2_DIR=$BUILD/_catch2")
      EXTRA_INC+=("$DEPS/include")
      echo "Catch2: .gpu_deps shim"
    else
      record env FAILED "no Catch2 (run bash bench/gpu_check.sh --prepare on the dev machine)"; return 1
    fi
  fi
  if [ ! -f /usr/include/stb/stb_image.h ]; then
    if [ -f "$DEPS/include/stb/stb_image.h" ]; then EXTRA_INC+=("$DEPS/include"); echo "stb_image: .gpu_deps"
    else record env FAILED "no stb_image.h (run bash bench/gpu_check.sh --prepare on the dev machine)"; return 1; fi
  fi
  record env ok "${gpu:-no GPU name}"
}

# A minimal Catch2 package for find_package(Catch2 2) + include(Catch): an interface target
# on the copied header, and catch_discover_tests registering the whole binary as one test.
write_catch2_shim() {
  local dir="$1"
  mkdir -p "$dir"
  cat > "$dir/Catch2Config.cmake" <<EOF
if(NOT TARGET Catch2::Catch2)
  add_library(Catch2::Catch2 INTERFACE IMPORTED)
  set_target_properties(Catch2::Catch2 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "$DEPS/include")
endif()
list(APPEND CMAKE_MODULE_PATH "\${CMAKE_CURRENT_LIST_DIR}")
EOF
  cat > "$dir/Catch2ConfigVersion.cmake" <<'EOF'
set(PACKAGE_VERSION "2.13.10")
if(PACKAGE_FIND_VERSION_MAJOR EQUAL 2)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
EOF
  cat > "$dir/Catch.cmake" <<'EOF'
function(catch_discover_tests target)
  add_test(NAME ${target} COMMAND ${target})
endfunction()
EOF
}

section_configure() {
  say "configure ($BUILD)"
  local flags=""
  local inc
  for inc in "${EXTRA_INC[@]+"${EXTRA_INC[@]}"}"; do flags="$flags -isystem $inc"; done
  local t0; t0=$(date +%s)
  if run_limited 300 cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGINE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 "${CMAKE_HINTS[@]+"${CMAKE_HINTS[@]}"}" \
        ${flags:+"-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_CUDA_FLAGS=$flags"} > "$LOGDIR/configure.log" 2>&1; then
    grep -E "cuDNN|CUDA backend|CIFAR" "$LOGDIR/configure.log" || true
    record configure ok "$(( $(date +%s) - t0 )) s"
  else
    tail -40 "$LOGDIR/configure.log"
    record configure FAILED "see configure.log"; return 1
  fi
}

section_build() {
  say "build ($(nproc) jobs)"
  local t0; t0=$(date +%s)
  if run_limited 150 cmake --build "$BUILD" --parallel "$(nproc)" > "$LOGDIR/build.log" 2>&1; then
    local warnings; warnings=$(grep -c -i "warning" "$LOGDIR/build.log" || true)
    echo "built; $warnings warning lines (see build.log)"
    grep -i -A3 "warning" "$LOGDIR/build.log" | head -30 || true
    record build ok "$(( $(date +%s) - t0 )) s, $warnings warning lines"
  else
    grep -E "error|FAILED" -A5 "$LOGDIR/build.log" | head -80
    tail -20 "$LOGDIR/build.log"
    record build FAILED "see build.log"; return 1
  fi
}

# Counts passed/failed/skipped from a CTest JUnit file.
junit_counts() {
  python3 - "$1" <<'PY' 2>/dev/null || echo "? ? ?"
import sys, xml.etree.ElementTree as ET
p = f = s = 0
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    st = tc.get("status", "")
    if tc.find("skipped") is not None or st in ("notrun", "disabled") or st.startswith("skip"):
        s += 1
    elif tc.find("failure") is not None or tc.find("error") is not None or st == "fail":
        f += 1
    else:
        p += 1
print(p, f, s)
PY
}

TEST_COUNTS="0 0 0"
section_tests() {
  say "ctest: the CPU suite"
  local t0; t0=$(date +%s)
  local rc1=0 rc2=0
  local exclude="cuda_tests${GPU_CHECK_CTEST_EXCLUDE:+|$GPU_CHECK_CTEST_EXCLUDE}"
  run_limited 120 ctest --test-dir "$BUILD" --output-on-failure --parallel "$(nproc)" -E "$exclude" \
      --timeout 240 --output-junit "$LOGDIR/ctest_cpu.xml" > "$LOGDIR/ctest_cpu.log" 2>&1 || rc1=$?
  grep -E "tests passed|tests failed|\*\*\*|Failed|Skipped|Total Test time" "$LOGDIR/ctest_cpu.log" | tail -40
  say "ctest: the [cuda] tests (verbose)"
  run_limited 60 ctest --test-dir "$BUILD" -R '^cuda_tests$' -V --timeout 300 \
      --output-junit "$LOGDIR/ctest_cuda.xml" > "$LOGDIR/ctest_cuda.log" 2>&1 || rc2=$?
  # The Catch2 report: failures in full, then the totals.
  sed -n '/^[0-9]*: ---*$/,$p' "$LOGDIR/ctest_cuda.log" | grep -v "^[0-9]*: *$" | tail -150
  grep -E "test cases|SKIPPED|tests passed|tests failed" "$LOGDIR/ctest_cuda.log" | tail -5
  local a b
  a=$(junit_counts "$LOGDIR/ctest_cpu.xml"); b=$(junit_counts "$LOGDIR/ctest_cuda.xml")
  # shellcheck disable=SC2086
  TEST_COUNTS=$(echo $a $b | awk '{print $1+$4, $2+$5, $3+$6}')
  CUDA_CASES=$(grep -E "^[0-9]*: (All tests passed|test cases:)" "$LOGDIR/ctest_cuda.log" | tail -1 | sed 's/^[0-9]*: //')
  local p f s
  read -r p f s <<< "$TEST_COUNTS"
  local detail="passed $p, failed $f, skipped $s ($(( $(date +%s) - t0 )) s)"
  if [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$f" = 0 ]; then
    if grep -q "SKIPPED: \[cuda\]" "$LOGDIR/ctest_cuda.log"; then record ctest FAILED "$detail; [cuda] tests SKIPPED: no device?"
    else record ctest ok "$detail"; fi
  else
    record ctest FAILED "$detail (rc cpu $rc1, cuda $rc2)"
  fi
  local why_skipped
  why_skipped=$(grep -o "SKIPPED: \[cuda\].*" "$LOGDIR/ctest_cuda.log" | head -1)
  if [ -n "$why_skipped" ]; then record cuda_tests FAILED "$why_skipped"
  elif [ "$rc2" = 0 ] && [ -n "${CUDA_CASES:-}" ]; then record cuda_tests ok "$CUDA_CASES"
  else record cuda_tests FAILED "${CUDA_CASES:-no Catch2 totals (crash or timeout?)}"; fi
}

section_sanitizer() {
  say "compute-sanitizer on the [sanitize] tests"
  if ! command -v compute-sanitizer >/dev/null 2>&1; then record sanitizer skipped "compute-sanitizer not installed"; return 0; fi
  local bin="$BUILD/engine_cuda_tests"
  if [ ! -x "$bin" ]; then record sanitizer FAILED "no $bin"; return 1; fi
  local tool verdicts="" bad=0 ran=0 rc
  local avail=$(( $(left) - 20 ))
  if [ "$avail" -lt 60 ]; then record sanitizer skipped "no time left in the budget"; return 0; fi
  local cap=$(( avail / 2 ))  # two tools share what is left
  for tool in memcheck racecheck; do
    local spec="[sanitize]"
    [ "$tool" = racecheck ] && spec="[sanitize]~cuBLASLt*"  # our shared-memory kernels only
    rc=0
    timeout --kill-after=5 "$cap" compute-sanitizer --tool "$tool" --error-exitcode 99 "$bin" "$spec" \
        > "$LOGDIR/sanitizer_$tool.log" 2>&1 || rc=$?
    tail -6 "$LOGDIR/sanitizer_$tool.log"
    # gVisor machines refuse the sanitizer outright ("Device not supported"): not our failure.
    if grep -q -E "Device not supported|not supported on this|Unable to find injection|No attachable process" \
         "$LOGDIR/sanitizer_$tool.log"; then
      verdicts="$verdicts $tool unsupported on this machine;"
    elif [ "$rc" = 0 ]; then verdicts="$verdicts $tool clean;"; ran=1
    elif [ "$rc" = 124 ]; then verdicts="$verdicts $tool incomplete (over its ${cap} s share);"  # slow, not wrong
    else verdicts="$verdicts $tool rc $rc (see sanitizer_$tool.log);"; bad=1
    fi
  done
  if [ "$bad" = 1 ]; then record sanitizer FAILED "${verdicts# }"
  elif [ "$ran" = 1 ]; then record sanitizer ok "${verdicts# }"
  else record sanitizer skipped "${verdicts# }"; fi
}

# The default recipe (simplecnn, Adam 1e-3, batch 256, 10 epochs) in each precision on the
# GPU: test accuracy, images/s and peak device memory from the trainer's JSON summary.
# The trainer's data flags: the CIFAR-10 JPEG copy (unpacked once from .gpu_deps), else synthetic.
DATA_ARGS=() DATA_WHERE=""
ensure_data() {
  [ -n "$DATA_WHERE" ] && return 0
  DATA_ARGS=(--synthetic --synthetic-size 20000) DATA_WHERE="synthetic data"
  if [ -f "$DEPS/cifar10-jpeg.tar.gz" ]; then
    if bash "$ROOT/data/get_cifar10.sh" "$BUILD/cifar10" "$DEPS/cifar10-jpeg.tar.gz" > "$LOGDIR/unpack.log" 2>&1; then
      DATA_ARGS=(--data "$BUILD/cifar10" --cache "$BUILD/cache") DATA_WHERE="CIFAR-10 JPEG copy"
    fi
  fi
}

section_train() {
  say "trainer: the default recipe in fp32, fp16, bf16"
  ensure_data
  local data_args=("${DATA_ARGS[@]}") where="$DATA_WHERE"
  local p rows="" bad=0
  for p in fp32 fp16 bf16; do
    local log="$LOGDIR/train_$p.jsonl" rc=0
    rm -f "$log"
    run_limited 90 "$BUILD/trainer" --device cuda --precision "$p" "${data_args[@]}" --log "$log" \
        > "$LOGDIR/train_$p.log" 2>&1 || rc=$?
    tail -12 "$LOGDIR/train_$p.log"
    local line; line=$(grep '"event":"summary"' "$log" 2>/dev/null | tail -1)
    if [ "$rc" != 0 ] || [ -z "$line" ]; then rows="$rows $p: FAILED (rc $rc);"; bad=1; continue; fi
    rows="$rows $(python3 - "$line" "$p" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
print(f"{sys.argv[2]} {s['test_accuracy']:.2f}% {s['images_per_s']:.0f} img/s {s['peak_bytes'] / 2**20:.0f} MiB;")
PY
)"
  done
  if [ "$bad" = 0 ]; then record train ok "${where}:${rows}"; else record train FAILED "${where}:${rows}"; fi
}

# The PyTorch side-by-side on the same data and recipe (the engine's decoded cache, data on
# the GPU): eager AMP and torch.compile AMP for simplecnn, then the comparison table against
# the trainer's fp32/fp16 logs from section_train.
section_pytorch() {
  say "PyTorch side-by-side (simplecnn, default recipe)"
  if ! python3 -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
    record pytorch skipped "no PyTorch with CUDA here"; return 0
  fi
  local cache_args=(--synthetic 20000)
  local u8; u8=$(find "$BUILD/cache" -maxdepth 1 -name "cifar10-*.u8" 2>/dev/null | head -1)
  [ -n "$u8" ] && cache_args=(--engine-cache "$u8")
  local mode rc verdict="" bad=0 jsons=()
  for mode in eager compile; do
    local extra=() out="$LOGDIR/pytorch_$mode.json"
    [ "$mode" = compile ] && extra=(--compile)
    rc=0
    run_limited 60 python3 "$ROOT/bench/pytorch_reference.py" --device cuda --model simplecnn --precision amp-fp16 \
        --data-mode gpu "${cache_args[@]}" --tf32 off "${extra[@]}" --json "$out" > "$LOGDIR/pytorch_$mode.log" 2>&1 || rc=$?
    tail -5 "$LOGDIR/pytorch_$mode.log"
    if [ "$rc" = 0 ] && [ -f "$out" ]; then jsons+=("$out"); verdict="$verdict $mode ok;"
    else verdict="$verdict $mode rc $rc;"; bad=1; fi
  done
  local ours=()
  for f in "$LOGDIR"/train_fp32.jsonl "$LOGDIR"/train_fp16.jsonl; do [ -f "$f" ] && ours+=("$f"); done
  if [ ${#ours[@]} -gt 0 ] && [ ${#jsons[@]} -gt 0 ]; then
    python3 "$ROOT/bench/compare.py" "${ours[@]}" "${jsons[@]}" --json "$LOGDIR/compare.json" | tee "$LOGDIR/compare.md"
  fi
  if [ "$bad" = 0 ]; then record pytorch ok "${verdict# }"; else record pytorch FAILED "${verdict# }"; fi
}

# The kernel benchmark (our linear/conv vs direct cuBLASLt/cuDNN calls, memory-bound kernels vs
# copy bandwidth) and the training-step benchmark (simplecnn, resnet9, resnet18 x fp32/fp16/bf16).
# Quick mode when little time is left; the summary row gives the ratio ranges.
section_bench() {
  say "benchmarks: bench_kernels and bench_train on the GPU"
  local quick=() rc1=0 rc2=0
  [ "$(left)" -lt 240 ] && quick=(--quick)
  run_limited 90 "$BUILD/bench_kernels" --device cuda "${quick[@]+"${quick[@]}"}" --json "$LOGDIR/bench_kernels.json" \
      > "$LOGDIR/bench_kernels.log" 2>&1 || rc1=$?
  grep -E "^ +(gemm|conv) .* fwd|copy of 1 GiB" "$LOGDIR/bench_kernels.log" | head -20
  run_limited 60 "$BUILD/bench_train" --device cuda --steps 20 --json "$LOGDIR/bench_train.json" \
      > "$LOGDIR/bench_train.log" 2>&1 || rc2=$?
  tail -16 "$LOGDIR/bench_train.log"
  local detail
  detail=$(python3 - "$LOGDIR/bench_kernels.json" "$LOGDIR/bench_train.json" <<'PY' 2>&1
import json, statistics, sys
out = []
try:
    rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r["device"] == "cuda" and r["ratio"] > 0]
    # The project's targets: linear within 5% of cuBLASLt, memory-bound kernels at >= 85% of copy.
    for group, what, bar in (("gemm", "linear/cuBLASLt", 0.95), ("conv", "conv/cuDNN", 0.95),
                             ("memory", "memory/copy", 0.85)):
        v = sorted((r["ratio"], r["name"] + " " + r["dtype"]) for r in rows if r["group"] == group)
        if v:
            med = statistics.median(x for x, _ in v)
            met = sum(x >= bar for x, _ in v)
            out.append(f"{what} {100 * v[0][0]:.0f}-{100 * v[-1][0]:.0f}% (median {100 * med:.0f}%, "
                       f"{met}/{len(v)} at >= {100 * bar:.0f}%, worst {v[0][1]})")
except Exception as e:
    out.append(f"bench_kernels: no results ({e})")
try:
    res = json.load(open(sys.argv[2]))["results"]
    by = {(r["model"], r["precision"]): r for r in res}
    for m in dict.fromkeys(r["model"] for r in res):
        a, b = by.get((m, "f32")), by.get((m, "f16"))
        if a and b:
            out.append(f"{m} fp16/fp32 {b['images_per_s'] / a['images_per_s']:.2f}x speed "
                       f"{b['peak_bytes'] / a['peak_bytes']:.2f}x memory ({b['images_per_s']:.0f} img/s)")
except Exception as e:
    out.append(f"bench_train: no results ({e})")
print("; ".join(out))
PY
)
  if [ "$rc1" = 0 ] && [ "$rc2" = 0 ]; then record bench ok "$detail"
  else record bench FAILED "rc bench_kernels $rc1, bench_train $rc2; $detail"; fi
}

# A ResNet side by side, short: resnet9 for 4 epochs with augmentation in our fp32 and fp16 and
# PyTorch eager AMP (the FP16-vs-FP32 speed/memory claim on a ResNet; accuracy after 4 epochs).
section_resnet() {
  say "resnet9: 4 epochs, ours fp32/fp16 vs PyTorch eager AMP"
  if [ "$(left)" -lt 150 ]; then record resnet skipped "under 150 s left in the budget"; return 0; fi
  ensure_data
  local data_args=("${DATA_ARGS[@]}")
  local p rc bad=0 files=()
  for p in fp32 fp16; do
    rc=0
    run_limited 60 "$BUILD/trainer" --device cuda --model resnet9 --precision "$p" --epochs 4 --augment \
        "${data_args[@]}" --log "$LOGDIR/resnet9_$p.jsonl" > "$LOGDIR/resnet9_$p.log" 2>&1 || rc=$?
    tail -3 "$LOGDIR/resnet9_$p.log"
    if [ "$rc" = 0 ]; then files+=("$LOGDIR/resnet9_$p.jsonl"); else bad=1; fi
  done
  if python3 -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
    local cache_args=(--synthetic 20000) u8
    u8=$(find "$BUILD/cache" -maxdepth 1 -name "cifar10-*.u8" 2>/dev/null | head -1)
    [ -n "$u8" ] && cache_args=(--engine-cache "$u8")
    rc=0
    run_limited 30 python3 "$ROOT/bench/pytorch_reference.py" --device cuda --model resnet9 --precision amp-fp16 \
        --epochs 4 --augment --data-mode gpu "${cache_args[@]}" --tf32 off --json "$LOGDIR/pytorch_resnet9.json" \
        > "$LOGDIR/pytorch_resnet9.log" 2>&1 || rc=$?
    tail -3 "$LOGDIR/pytorch_resnet9.log"
    if [ "$rc" = 0 ]; then files+=("$LOGDIR/pytorch_resnet9.json"); else bad=1; fi
  fi
  [ ${#files[@]} -gt 0 ] && python3 "$ROOT/bench/compare.py" "${files[@]}" > "$LOGDIR/compare_resnet9.md" 2>&1
  cat "$LOGDIR/compare_resnet9.md" 2>/dev/null
  if [ "$bad" = 0 ]; then record resnet ok "${#files[@]} runs, table in compare_resnet9.md"
  else record resnet FAILED "a run failed (see resnet9_*.log, pytorch_resnet9.log)"; fi
}

SECTIONS=(section_env section_configure section_build section_tests section_train section_pytorch section_bench
          section_resnet section_sanitizer)

# GPU_CHECK_ONLY="train bench" runs just those sections (after env, configure and build, which
# always run; an incremental build is quick when the build folder is still there).
if [ -n "${GPU_CHECK_ONLY:-}" ]; then
  kept=()
  for s in "${SECTIONS[@]}"; do
    case " env configure build ${GPU_CHECK_ONLY} " in *" ${s#section_} "*) kept+=("$s") ;; esac
  done
  SECTIONS=("${kept[@]}")
fi

for s in "${SECTIONS[@]}"; do
  if [ "$(left)" -lt 15 ]; then record "${s#section_}" FAILED "out of time budget (${BUDGET} s)"; break; fi
  if ! "$s"; then
    # A section that cannot proceed stops the ones depending on it.
    case "$s" in section_env|section_configure|section_build) break ;; esac
  fi
done

# ---- logs back and the summary ---------------------------------------------------------------
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  for f in configure.log build.log ctest_cpu.log ctest_cuda.log sanitizer_memcheck.log sanitizer_racecheck.log \
           train_fp32.log train_fp16.log train_bf16.log train_fp32.jsonl train_fp16.jsonl train_bf16.jsonl \
           pytorch_eager.log pytorch_compile.log pytorch_eager.json pytorch_compile.json compare.md compare.json \
           bench_kernels.log bench_kernels.json bench_train.log bench_train.json resnet9_fp32.log resnet9_fp16.log \
           resnet9_fp32.jsonl resnet9_fp16.jsonl pytorch_resnet9.log pytorch_resnet9.json compare_resnet9.md; do
    [ -f "$LOGDIR/$f" ] && tail -c 4000000 "$LOGDIR/$f" > "$OUT/$f"
  done
fi
commit="${GPU_CHECK_COMMIT:-}"
if [ -z "$commit" ]; then
  commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "unknown (no .git; set GPU_CHECK_COMMIT)")
  if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit+dirty"; fi
fi
read -r P F S <<< "$TEST_COUNTS"
# The comparison tables (ours vs PyTorch, and each precision vs its own FP32), then the summary.
for f in compare.md compare_resnet9.md; do
  if [ -s "$LOGDIR/$f" ]; then say "comparison: $f"; cat "$LOGDIR/$f"; fi
done
say "gpu_check summary"
printf '%-12s %s\n' commit "$commit"
for row in "${SUMMARY[@]}"; do
  IFS='|' read -r name verdict detail <<< "$row"
  printf '%-12s %-8s %s\n' "$name" "$verdict" "$detail"
done
printf '%-12s passed %s, failed %s, skipped %s\n' tests "$P" "$F" "$S"
printf '%-12s %s s (budget %s s)\n' "wall time" "$(( $(date +%s) - START ))" "$BUDGET"
if [ "$FAILED" = 0 ]; then echo "RESULT: PASS"; exit 0; else echo "RESULT: FAIL"; exit 1; fi

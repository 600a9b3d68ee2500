#!/usr/bin/env bash
# shellcheck disable=SC2317  # the section functions are called through "section_$name" (indirectly)
# bench/gpu_check.sh: the ONE script to run on the GPU (H200) machine. Every call runs env,
# configure, build (only the targets its sections need) and versions, then its own sections,
# each with a time cap (seconds). The first call runs what must come back first, in this order:
#
#   env          the driver line first (a driver too old for the CUDA runtime: one verdict,      0
#                nothing else runs); nvcc (a pip nvcc without libcudart.so / libcudart_static.a
#                gets a link folder), cuDNN/cuBLASLt/NCCL (toolkit or pip nvidia-*), Catch2/stb
#   configure    CMake, CUDA backend on, sm_90; a missing cuDNN stops it here                  30
#   build        the call's targets (call 1: engine_cuda_tests, trainer; about 400 s on one     140
#                core, so a minute or so on the GPU machine's 16)
#   versions     trainer --version: CUDA runtime/driver, cuBLASLt, cuDNN loaded vs built        10
#                with, and the file of each library the loader mapped
#   cuda_tests   the [cuda] test binary but its [nccl] cases, CUDA_LAUNCH_BLOCKING=1 (a fault   75
#                names its launch), deterministic
#   train        the default recipe (simplecnn, Adam, batch 256) in fp16, then fp32, for        55
#                GPU_CHECK_EPOCHS (2) epochs on the CIFAR-10 copy: accuracy, images/s, memory;
#                fp16 (the headline) first, fp32 in what fp16 leaves of the cap
#   nccl_tests   the [nccl] cases (a one-rank communicator) apart, NCCL_SOCKET_IFNAME=lo,      20
#                NCCL_DEBUG=INFO (a stalled start-up shows how far it got): a stall costs this
#                line only, after everything else of the call has come back
#
# The second call, GPU_CHECK_CALL=2 (configure and build are incremental while the machine is
# still warm, and pytorch then finds call 1's training logs for its table):
#   pytorch      PyTorch eager AMP on the same data and recipe, and the comparison table         60
#   bench        bench_kernels --quick (vs cuBLASLt/cuDNN, vs copy bandwidth) and bench_train    60
#
# A call's budget is GPU_CHECK_BUDGET (330 s, build included), and each call's caps add up to no
# more (the dry run prints the sums), so that two calls fit in the 15 minutes of device time a
# session has, machine start included. Pass each device call a timeout_s of the budget + 30 s
# (the dry run prints it).
#
# Further sections run only when named in GPU_CHECK_ONLY (a later call; the build is
# incremental if the build folder is still there):
#   sanitizer    compute-sanitizer memcheck on the small [cuda][sanitize] tests                120
#   cpu_tests    the whole CPU CTest suite (CI runs it already)                                240
#   compile      PyTorch torch.compile AMP (the first compile alone takes minutes)             300
#   resnet       resnet9, ours fp32/fp16 vs PyTorch eager AMP, 4 epochs                        300
#   racecheck    compute-sanitizer racecheck on our shared-memory [sanitize] kernels            120
#   numerics     trainer --device cuda with --inspect-numerics, --detect-anomaly[=strict] and     60
#                --fp32-layers fc1: the range kernel, anomaly reads and FP32 regions in the trainer
#   export       train 1 epoch, export safetensors, predict --device cuda over the test set     150
#                (= the trainer's GPU accuracy), PyTorch (CUDA) on the exported file with the
#                per-image agreement, tests/export_predict.sh with PyTorch as its reference
#
# A section gets its cap or what is left of the budget, whichever is less. One that cannot start
# in time, or that is cut short by the budget, is reported "not-run" (not a failure of the
# engine); one that runs past its full cap is FAILED (a hang). Exit status 0 only when no
# section failed.
#
# What comes back ($OUT, when set): written after every section and every 30 s while one runs,
# so a call cut short by its time limit still brings back everything up to that moment. At most
# 8 plain files, at the top of $OUT, each under 16 MiB (the device tool's limits):
#   summary.md         the commit, the summary table so far (a section in flight says so), the
#                      comparison tables
#   console.log        everything this script printed (its last 15 MiB)
#   logs.tar.gz        every log and JSON file of the run, each cut to its last 4 MiB
#   fail_<name>.log    the logs of up to 4 failed sections, each cut to its last 2 MiB
#
#   bash bench/gpu_check.sh             on the GPU machine, from anywhere in the checkout: call 1
#   GPU_CHECK_CALL=2 bash bench/gpu_check.sh   call 2 (pytorch, bench)
#   bash bench/gpu_check.sh --dry-run   anywhere: walks the sections and prints the plan, runs nothing
#   bash bench/gpu_check.sh --prepare   on the development machine, BEFORE the GPU call:
#                                       copies the header-only build dependencies the GPU
#                                       image lacks (Catch2 v2, stb_image) and the CIFAR-10
#                                       archive into .gpu_deps/, which is git-ignored: name it
#                                       in the device call's `carry`
#   source bench/gpu_check.sh           defines the functions and runs nothing (tests/gpu_check_selftest.sh)
#
# Environment knobs: GPU_CHECK_BUILD (build dir, default build-gpu), GPU_CHECK_BUDGET,
# GPU_CHECK_CALL (1 or 2: that call's sections), GPU_CHECK_ONLY (e.g. "sanitizer resnet": only
# those sections after env, configure, build and versions; over GPU_CHECK_CALL),
# GPU_CHECK_EPOCHS (train/pytorch epochs, default 2), GPU_CHECK_PRECISIONS (default "fp16
# fp32", run in that order), GPU_CHECK_COMMIT (the commit to report when the copy there has no
# .git), CUDNN_ROOT (skip the search), OUT (a folder whose files come back from the GPU machine).
#
# The GPU image has nvcc, CMake, ninja and PyTorch; cuDNN and cuBLAS may live only in
# PyTorch's nvidia-* pip packages, found here through python3 and handed to CMake as hints.
# Nothing is downloaded.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${GPU_CHECK_BUILD:-$ROOT/build-gpu}"
DEPS="$ROOT/.gpu_deps"
BUDGET="${GPU_CHECK_BUDGET:-330}"
TIMEOUT_MARGIN=30   # the device call's timeout_s is BUDGET + this: room for the last publish
EPOCHS="${GPU_CHECK_EPOCHS:-2}"
PRECISIONS="${GPU_CHECK_PRECISIONS:-fp16 fp32}"  # the headline first: a short call still brings it back
PUBLISH_EVERY="${GPU_CHECK_PUBLISH_EVERY:-30}"
START=$(date +%s)
DEADLINE=$((START + BUDGET))
LOGDIR="$BUILD/gpu_check_logs"
PREV_TRAIN="$BUILD/gpu_check_prev_train"  # the last call's train logs, for call 2's PyTorch table
# PyTorch runs with the loader path it came with: the CUDA libraries our build linked (put first
# after configure) may be other copies than those its wheels were built against.
ORIG_LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}"
TORCH_PY=(env "LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH" python3)
ROWS="$LOGDIR/summary.rows"        # "name|verdict|detail", one per finished section
CURRENT="$LOGDIR/current.section"  # "name|start second" of the section in flight

# name|cap seconds|what it runs (the plan --dry-run prints). Every call runs COMMON_SECTIONS,
# then its own: call 1 CALL1_SECTIONS, call 2 (GPU_CHECK_CALL=2) CALL2_SECTIONS, a later call
# those GPU_CHECK_ONLY names. Each call's caps add up to no more than the budget (330 s).
COMMON_SECTIONS=(
  "env|0|nvidia-smi's driver line and verdict; nvcc (cudart link folder if needed), cuDNN, cuBLASLt, NCCL, Catch2, stb_image"
  "configure|30|cmake -DENGINE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
  "build|140|cmake --build: the targets of the call's sections"
  "versions|10|trainer --version: CUDA runtime/driver, cuBLASLt, cuDNN loaded vs built, files loaded"
)
CALL1_SECTIONS=(
  "cuda_tests|75|CUDA_LAUNCH_BLOCKING=1 engine_cuda_tests \"~[nccl]\" (deterministic cuDNN)"
  "train|55|trainer --device cuda --precision {$PRECISIONS} --epochs $EPOCHS, in that order"
  "nccl_tests|20|NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO engine_cuda_tests \"[nccl]\" (one-rank communicator)"
)
CALL2_SECTIONS=(
  "pytorch|45|pytorch_reference.py eager AMP, $EPOCHS epochs, then compare.py with call 1's train logs"
  "airbench|45|trainer --recipe airbench94 --precision fp16 beside airbench's package (.gpu_deps/airbench) on our CIFAR-10 copy"
  "bench|30|bench_kernels --device cuda --quick; bench_train --device cuda --steps 20"
)
EXTRA_SECTIONS=(
  "sanitizer|120|compute-sanitizer --tool memcheck engine_cuda_tests [sanitize]"
  "cpu_tests|240|ctest: the whole CPU suite (builds engine_tests first)"
  "compile|300|pytorch_reference.py --compile AMP, $EPOCHS epochs, then compare.py"
  "resnet|300|resnet9 4 epochs: trainer fp32/fp16 and PyTorch eager AMP"
  "racecheck|120|compute-sanitizer --tool racecheck engine_cuda_tests [sanitize]~cuBLASLt*"
  "numerics|60|trainer --device cuda --inspect-numerics 2 --detect-anomaly --fp32-layers fc1; =strict overflow"
  "export|150|trainer 1 epoch + --export; predict --device cuda; pytorch_eval.py; export_predict.sh"
)
ALL_SECTIONS=("${COMMON_SECTIONS[@]}" "${CALL1_SECTIONS[@]}" "${CALL2_SECTIONS[@]}" "${EXTRA_SECTIONS[@]}")

# ---- helpers ---------------------------------------------------------------------------------
say() { printf '\n== [%4d s] %s\n' "$(( $(date +%s) - START ))" "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }
record() {  # record NAME VERDICT DETAIL; verdicts other than ok / skipped / not-run fail the run
  printf '%s|%s|%s\n' "$1" "$2" "${3//$'\n'/ }" >> "$ROWS"
}
recorded() { [ -f "$ROWS" ] && cut -d'|' -f1 "$ROWS" | grep -qx "$1"; }
any_failed() { [ -f "$ROWS" ] && cut -d'|' -f2 "$ROWS" | grep -qvxE 'ok|skipped|not-run'; }
# run_capped CAP cmd...: runs cmd for at most CAP seconds, or what is left of the budget when
# that is less (then SHORTENED=1). Returns 125 without running when under 10 s are left, and
# timeout's 124 when the command ran out of time. timeout runs in its own process group, out of
# reach of a signal to ours, and bash runs a trap only once a foreground command ends: so it
# runs in the background, waited for (a trapped signal ends the wait at once), with its pid in
# RUN_PID for the trap to stop.
SHORTENED=0 RUN_PID=""
run_capped() {
  local cap="$1"; shift
  local t rc=0; t=$(left)
  SHORTENED=0
  if [ "$t" -lt "$cap" ]; then SHORTENED=1; cap=$t; fi
  if [ "$cap" -lt 10 ]; then echo "(no time left for: $*)"; return 125; fi
  timeout --kill-after=10 "$cap" "$@" &
  RUN_PID=$!
  wait "$RUN_PID" || rc=$?
  RUN_PID=""
  return "$rc"
}
# verdict_for RC: ok, not-run (never started, or cut short by the budget) or FAILED.
verdict_for() {
  case "$1" in
    0) echo ok ;;
    125) echo not-run ;;
    124|137) if [ "$SHORTENED" = 1 ]; then echo not-run; else echo FAILED; fi ;;
    *) echo FAILED ;;
  esac
}
cap_of() {  # the cap of section $1 from the plan
  local row
  for row in "${ALL_SECTIONS[@]}"; do
    [ "${row%%|*}" = "$1" ] && { local c; IFS='|' read -r _ c _ <<< "$row"; echo "$c"; return; }
  done
  echo 60
}
call_of() {  # which call runs section $1: every, 1, 2 or later (named in GPU_CHECK_ONLY)
  local row
  for row in "${COMMON_SECTIONS[@]}"; do [ "${row%%|*}" = "$1" ] && { echo every; return; }; done
  for row in "${CALL1_SECTIONS[@]}"; do [ "${row%%|*}" = "$1" ] && { echo 1; return; }; done
  for row in "${CALL2_SECTIONS[@]}"; do [ "${row%%|*}" = "$1" ] && { echo 2; return; }; done
  echo later
}
caps_sum() {  # caps_sum ROW...: the caps of those plan rows added up
  local row c total=0
  for row in "$@"; do IFS='|' read -r _ c _ <<< "$row"; total=$((total + c)); done
  echo "$total"
}
in_plan() {  # in_plan NAME...: true when PLAN holds any of them
  local row want
  for row in "${PLAN[@]}"; do for want in "$@"; do [ "${row%%|*}" = "$want" ] && return 0; done; done
  return 1
}
build_targets() {  # what the plan's sections run, and no more: call 1 builds only the first two
  local t=(trainer)
  in_plan cuda_tests nccl_tests sanitizer racecheck && t=(engine_cuda_tests "${t[@]}")
  in_plan export && t+=(predict)
  in_plan bench && t+=(bench_kernels bench_train)
  echo "${t[*]}"
}

# ---- what comes back: $OUT, at most 8 files ----------------------------------------------------
MiB=$((1024 * 1024))
MAX_FAIL_LOGS=4   # summary + console + logs.tar.gz + 4 = 7, and one .part while copying

logs_of() {  # the logs a section writes, for its fail_<name>.log
  local d="$LOGDIR"
  case "$1" in
    configure|build|versions|cuda_tests|nccl_tests) echo "$d/$1.log" ;;
    sanitizer) echo "$d/sanitizer_memcheck.log" ;;
    racecheck) echo "$d/sanitizer_racecheck.log" ;;
    train) echo "$d"/train_*.log ;;
    pytorch) echo "$d/pytorch_eager.log" ;;
    airbench) echo "$d/airbench_ours.log $d/airbench_theirs.log" ;;
    compile) echo "$d/pytorch_compile.log" ;;
    bench) echo "$d/bench_kernels.log $d/bench_train.log" ;;
    cpu_tests) echo "$d/build_all.log $d/ctest_cpu.log" ;;
    resnet) echo "$d"/resnet9_*.log "$d/pytorch_resnet9.log" ;;
    numerics) echo "$d"/numerics/*.log ;;
    export) echo "$d"/export/*.log ;;
    *) echo "$d/console.log" ;;
  esac
}

write_summary() {
  echo "# gpu_check: commit $COMMIT"
  echo
  printf '| %-10s | %-8s | %s |\n' section verdict detail
  printf '|%s|%s|%s|\n' "------------" "----------" "--------"
  printf '| %-10s | %-8s | %s |\n' commit "" "$COMMIT"
  local name verdict detail
  if [ -f "$ROWS" ]; then
    while IFS='|' read -r name verdict detail; do
      printf '| %-10s | %-8s | %s |\n' "$name" "$verdict" "$detail"
    done < "$ROWS"
  fi
  if [ -s "$CURRENT" ]; then
    IFS='|' read -r name detail < "$CURRENT"
    printf '| %-10s | %-8s | %s |\n' "$name" running \
      "started at $((detail - START)) s; still running when this was written (if this is the last copy, the call was cut short here)"
  fi
  printf '| %-10s | %-8s | %s s of %s s |\n' "wall time" "" "$(( $(date +%s) - START ))" "$BUDGET"
  local f
  for f in compare_eager.md compare_compile.md compare_resnet9.md; do
    if [ -s "$LOGDIR/$f" ]; then printf '\n## %s\n\n' "$f"; cat "$LOGDIR/$f"; fi
  done
}

# Builds the files in a staging folder, then copies them into $OUT one at a time (as NAME.part,
# renamed when complete), so $OUT never holds a half-written file under its real name.
publish_now() {
  local stage="$LOGDIR/.publish.$BASHPID" f name
  rm -rf "$stage"; mkdir -p "$stage/logs"
  write_summary > "$stage/summary.md"
  [ -f "$LOGDIR/console.log" ] && tail -c $((15 * MiB)) "$LOGDIR/console.log" > "$stage/console.log"
  local cut
  for cut in 4 1; do  # every log cut to its last 4 MiB; if the archive is still too big, 1 MiB
    rm -rf "$stage/logs"; mkdir -p "$stage/logs"
    # Text only: checkpoints, weights and images that sections leave would crowd the logs out.
    ( cd "$LOGDIR" && find . -path './.publish.*' -prune -o -type f ! -name '.*' \( -name '*.log' -o -name '*.json' \
        -o -name '*.jsonl' -o -name '*.md' -o -name '*.xml' -o -name '*.txt' -o -name '*.rows' -o -name '*.section' \) \
        -print ) | while IFS= read -r f; do
      mkdir -p "$stage/logs/$(dirname "$f")"
      tail -c $((cut * MiB)) "$LOGDIR/$f" > "$stage/logs/$f"
    done
    tar -czf "$stage/logs.tar.gz" -C "$stage" logs 2>/dev/null
    [ "$(wc -c < "$stage/logs.tar.gz")" -lt $((15 * MiB)) ] && break
    rm -f "$stage/logs.tar.gz"
  done
  rm -rf "$stage/logs"
  local n=0 verdict detail
  if [ -f "$ROWS" ]; then
    while IFS='|' read -r name verdict detail; do
      case "$verdict" in ok|skipped|not-run) continue ;; esac
      [ "$name" = env ] && continue  # its whole output is console.log
      [ "$n" -ge "$MAX_FAIL_LOGS" ] && break
      for f in $(logs_of "$name"); do
        [ -f "$f" ] && { echo "==== ${f#"$LOGDIR"/}"; cat "$f"; }
      done | tail -c $((2 * MiB)) > "$stage/fail_$name.log"
      n=$((n + 1))
    done < "$ROWS"
  fi
  rm -f "$OUT"/*.part  # left by a publisher that was killed mid-copy: at most one .part at a time
  for f in "$stage"/*; do
    name=$(basename "$f")
    cp "$f" "$OUT/$name.part" && mv -f "$OUT/$name.part" "$OUT/$name"
  done
  rm -rf "$stage"
}
publish() {  # one publisher at a time: the section loop and the 30 s ticker (which needs flock)
  [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] || return 0
  if command -v flock > /dev/null 2>&1; then
    ( flock 9; publish_now ) 9> "$LOGDIR/.publish.lock"
  else
    publish_now
  fi
}

# ---- driver, runtime libraries -------------------------------------------------------------------

# driver_verdict DRIVER_VERSION DRIVER_CUDA NVCC_RELEASE: nothing when the driver can run what this
# nvcc builds, else one verdict line. DRIVER_CUDA is nvidia-smi's "CUDA Version" (the newest
# runtime the driver supports; a 13.x runtime needs a 13.x driver, i.e. 580 or later).
driver_verdict() {
  local drv="$1" drv_cuda="$2" rel="$3" need=""
  local major="${rel%%.*}"
  case "$major" in 13) need=580 ;; 12) need=525 ;; 11) need=450 ;; esac
  if [ -z "$drv" ]; then
    echo "no NVIDIA driver answered (nvidia-smi: ${drv_cuda:-not found}): nothing on the GPU can run"
  elif [ -n "$drv_cuda" ] && [ "${drv_cuda%%.*}" -lt "$major" ] 2>/dev/null; then
    echo "driver $drv supports CUDA up to $drv_cuda, older than this nvcc's CUDA $rel (needs driver >= ${need:-?}): nothing built here can run"
  elif [ -n "$need" ] && [ "${drv%%.*}" -lt "$need" ] 2>/dev/null; then
    echo "driver $drv is older than CUDA $rel needs (>= $need): nothing built here can run"
  fi
}

# cudart_link_fix NVCC LINKDIR [MORE_LIB_DIRS...]: a pip-installed nvcc may come without the
# unversioned libcudart.so (needed by -lcudart and CMake's CUDAToolkit) and without
# libcudart_static.a (nvcc's default link, so CMake's compiler check fails before anything
# runs). Where they are missing, LINKDIR gets unversioned symlinks to the versioned files
# (libcudart, and libcublasLt/libcublas beside it) and CUDA_FIX_CMAKE / CUDA_FIX_FLAGS /
# CUDA_FIX_LDFLAGS say how CMake uses them. Returns 1 when there is no libcudart at all.
CUDA_FIX_CMAKE=() CUDA_FIX_FLAGS="" CUDA_FIX_LDFLAGS=""
cudart_link_fix() {
  local nvcc="$1" linkdir="$2"; shift 2
  local top d f have_so=0 have_static=0 versioned=""
  top="$(cd "$(dirname "$(readlink -f "$nvcc")")/.." && pwd)"
  local dirs=("$top/lib64" "$top/lib" "$top"/targets/*/lib "$@")
  for d in "${dirs[@]}"; do
    [ -d "$d" ] || continue
    [ -e "$d/libcudart.so" ] && have_so=1
    [ -e "$d/libcudart_static.a" ] && have_static=1
    if [ -z "$versioned" ]; then
      for f in "$d"/libcudart.so.[0-9]*; do [ -e "$f" ] && { versioned="$f"; break; }; done
    fi
  done
  CUDA_FIX_CMAKE=() CUDA_FIX_FLAGS="" CUDA_FIX_LDFLAGS=""
  if [ "$have_so" = 1 ] && [ "$have_static" = 1 ]; then echo "cudart: toolkit (shared and static)"; return 0; fi
  if [ "$have_so" = 0 ] && [ -z "$versioned" ]; then echo "cudart: no libcudart.so* next to $nvcc"; return 1; fi
  if [ "$have_so" = 0 ]; then
    mkdir -p "$linkdir"
    ln -sf "$(readlink -f "$versioned")" "$linkdir/libcudart.so"
    for f in "$(dirname "$versioned")"/libcublasLt.so.[0-9]* "$(dirname "$versioned")"/libcublas.so.[0-9]*; do
      [ -e "$f" ] || continue
      local base; base="$(basename "$f")"; base="${base%%.so.*}.so"
      [ -e "$(dirname "$versioned")/$base" ] || ln -sf "$(readlink -f "$f")" "$linkdir/$base"
    done
    # CUDAToolkit takes its library folder from CUDA_CUDART, so it finds cuBLASLt there too.
    CUDA_FIX_CMAKE+=("-DCUDA_CUDART=$linkdir/libcudart.so")
    CUDA_FIX_FLAGS="-L$linkdir" CUDA_FIX_LDFLAGS="-L$linkdir"
  fi
  # Without the static library nvcc's own links (CMake's compiler check) must take the shared one.
  [ "$have_static" = 0 ] && CUDA_FIX_FLAGS="${CUDA_FIX_FLAGS:+$CUDA_FIX_FLAGS }-cudart shared"
  local devrt=no
  for d in "${dirs[@]}"; do [ -e "$d/libcudadevrt.a" ] && devrt=yes; done
  echo "cudart: $versioned; link folder $linkdir (unversioned libcudart.so: $([ "$have_so" = 1 ] && echo yes || echo made)," \
       "libcudart_static.a: $([ "$have_static" = 1 ] && echo yes || echo "no, linking shared"), libcudadevrt.a: $devrt)"
}

# runtime_library_dirs CMAKE_CACHE: the folders of the CUDA libraries CMake linked (cudart,
# cuBLASLt, cuDNN, NCCL), real paths, one per line: what LD_LIBRARY_PATH must hold so the loader
# maps those same files (cuDNN opens its sub-libraries by name from its own folder).
runtime_library_dirs() {
  local var v
  for var in CUDA_CUDART CUDA_cudart_LIBRARY CUDA_cublasLt_LIBRARY CUDA_cublas_LIBRARY CUDNN_LIBRARY NCCL_LIBRARY; do
    v=$(sed -nE "s/^$var:[A-Z]+=(.*)$/\1/p" "$1" | head -1)
    [ -n "$v" ] && [ -e "$v" ] && dirname "$(readlink -f "$v")"
  done | awk '!seen[$0]++'
}

# ---- sections --------------------------------------------------------------------------------
CMAKE_HINTS=()
EXTRA_INC=()

section_env() {
  say "environment"
  # The driver first: with one too old for the runtime nothing else can pass.
  local smi="" drv="" drv_cuda="" gpu="" verdict="" have_smi=0
  command -v nvidia-smi > /dev/null 2>&1 && have_smi=1
  if [ "$have_smi" = 1 ]; then
    smi=$(timeout 20 nvidia-smi 2>&1 || true)
    echo "driver: $(grep -m1 'Driver Version' <<< "$smi" | sed -E 's/^[ |]*//; s/[ |]*$//' || true)"
    drv=$(timeout 20 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
    drv_cuda=$(sed -nE 's/.*CUDA Version: *([0-9.]+).*/\1/p' <<< "$smi" | head -1)
    gpu=$(timeout 20 nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)
  else
    echo "driver: no nvidia-smi here; going on without a driver verdict (the [cuda] binary's first line will tell)"
  fi
  echo "GPU:   ${gpu:-none visible to nvidia-smi}"
  deps_line
  NVCC="$(command -v nvcc || true)"
  [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
  if [ -z "$NVCC" ]; then record env FAILED "no nvcc"; return 1; fi
  local release; release=$("$NVCC" --version | sed -nE 's/.*release ([0-9]+\.[0-9]+).*/\1/p' | head -1)
  echo "nvcc:  $NVCC (release ${release:-?})"
  [ "$have_smi" = 1 ] && verdict=$(driver_verdict "$drv" "${drv_cuda:-$(head -1 <<< "$smi")}" "${release:-0}")
  if [ -n "$verdict" ]; then echo "VERDICT: $verdict"; record env FAILED "$verdict"; return 1; fi
  echo "cmake: $(cmake --version | head -1), ninja $(ninja --version 2>/dev/null || echo missing), $(nproc) cores"
  CUDA_HOME_GUESS="$(cd "$(dirname "$NVCC")/.." && pwd)"
  CMAKE_HINTS+=("-DCMAKE_CUDA_COMPILER=$NVCC")

  # Where the toolkit lacks cuDNN or cuBLASLt, take them from the nvidia-* pip packages
  # (namespace packages: walk nvidia.__path__, __file__ may be None).
  local py_out
  py_out=$(timeout 60 python3 - <<'PY' 2>/dev/null
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
            elif f == "nccl.h": found.setdefault("nccl_inc", dp)
            elif f.startswith("libnccl.so"): found.setdefault("nccl_lib", os.path.join(dp, f))
            elif f.startswith("libcudart.so"): found.setdefault("cudart_lib", dp)
for k, v in found.items():
    print(f"{k}={v}")
PY
)
  local cudnn_inc="" cudnn_lib="" cublaslt_inc="" cublaslt_lib="" nccl_inc="" nccl_lib="" cudart_lib="" line
  while IFS= read -r line; do
    case "$line" in
      cudnn_inc=*) cudnn_inc="${line#*=}" ;;
      cudnn_lib=*) cudnn_lib="${line#*=}" ;;
      cublaslt_inc=*) cublaslt_inc="${line#*=}" ;;
      cublaslt_lib=*) cublaslt_lib="${line#*=}" ;;
      nccl_inc=*) nccl_inc="${line#*=}" ;;
      nccl_lib=*) nccl_lib="${line#*=}" ;;
      cudart_lib=*) cudart_lib="${line#*=}" ;;
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
  # NCCL (the data-parallel GPU path; its [cuda] tests run one rank): toolkit or pip nvidia-nccl.
  if [ -f "$CUDA_HOME_GUESS/include/nccl.h" ]; then
    echo "NCCL: toolkit"
  elif [ -n "$nccl_inc" ] && [ -n "$nccl_lib" ]; then
    CMAKE_HINTS+=("-DNCCL_INCLUDE_DIR=$nccl_inc" "-DNCCL_LIBRARY=$nccl_lib")
    echo "NCCL: pip: $nccl_lib"
  else
    echo "NCCL: not found (the data-parallel GPU tests will not be built)"
  fi
  # A pip nvcc without libcudart.so / libcudart_static.a: a link folder and shared cudart.
  local more=(); [ -n "$cudart_lib" ] && more+=("$cudart_lib")
  if ! cudart_link_fix "$NVCC" "$BUILD/_cudart_link" "${more[@]+"${more[@]}"}"; then
    record env FAILED "no libcudart next to $NVCC or in the nvidia-* pip packages"; return 1
  fi
  CMAKE_HINTS+=("${CUDA_FIX_CMAKE[@]+"${CUDA_FIX_CMAKE[@]}"}")
  # Run time: LD_LIBRARY_PATH gets the folders of the libraries CMake linked, after configure.

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
  record env ok "${gpu:-no GPU name}, driver ${drv:-?} (CUDA ${drv_cuda:-?}), nvcc ${release:-?}"
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
  local flags="" inc
  for inc in "${EXTRA_INC[@]+"${EXTRA_INC[@]}"}"; do flags="$flags -isystem $inc"; done
  local cuda_flags="$flags${CUDA_FIX_FLAGS:+ $CUDA_FIX_FLAGS}" link_args=()
  [ -n "$CUDA_FIX_LDFLAGS" ] && link_args=("-DCMAKE_EXE_LINKER_FLAGS=$CUDA_FIX_LDFLAGS" "-DCMAKE_SHARED_LINKER_FLAGS=$CUDA_FIX_LDFLAGS")
  local t0; t0=$(date +%s)
  if run_capped "$(cap_of configure)" cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DENGINE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 "${CMAKE_HINTS[@]+"${CMAKE_HINTS[@]}"}" "${link_args[@]+"${link_args[@]}"}" \
        ${flags:+"-DCMAKE_CXX_FLAGS=$flags"} ${cuda_flags:+"-DCMAKE_CUDA_FLAGS=$cuda_flags"} > "$LOGDIR/configure.log" 2>&1; then
    grep -E "cuDNN|CUDA backend|CIFAR|NCCL" "$LOGDIR/configure.log" || true
    # Run what was built: the loader gets the folders of the very libraries CMake linked.
    local dirs; dirs=$(runtime_library_dirs "$BUILD/CMakeCache.txt" | paste -sd: -)
    [ -n "$dirs" ] && export LD_LIBRARY_PATH="$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    record configure ok "$(( $(date +%s) - t0 )) s; libraries from ${dirs:-the default loader path}"
  else
    tail -40 "$LOGDIR/configure.log"
    record configure FAILED "see configure.log"; return 1
  fi
}

section_build() {
  local targets; read -r -a targets <<< "$(build_targets)"
  say "build ($(nproc) jobs): ${targets[*]}"
  local t0 rc=0; t0=$(date +%s)
  run_capped "$(cap_of build)" cmake --build "$BUILD" --parallel "$(nproc)" --target "${targets[@]}" \
      > "$LOGDIR/build.log" 2>&1 || rc=$?
  if [ "$rc" = 0 ]; then
    local warnings; warnings=$(grep -c -i "warning" "$LOGDIR/build.log" || true)
    echo "built; $warnings warning lines (see build.log)"
    grep -i -A3 "warning" "$LOGDIR/build.log" | head -30 || true
    record build ok "$(( $(date +%s) - t0 )) s, $warnings warning lines"
  else
    grep -E "error|FAILED" -A5 "$LOGDIR/build.log" | head -80
    tail -20 "$LOGDIR/build.log"
    record build "$(verdict_for "$rc")" "rc $rc after $(( $(date +%s) - t0 )) s, see build.log"; return 1
  fi
}

LIBRARY_VERSIONS=""
section_versions() {
  say "library versions: loaded vs built with"
  local rc=0
  run_capped "$(cap_of versions)" "$BUILD/trainer" --version > "$LOGDIR/versions.log" 2>&1 || rc=$?
  cat "$LOGDIR/versions.log"
  LIBRARY_VERSIONS=$(grep -E "^(CUDA runtime|cuBLASLt|cuDNN|loaded file)" "$LOGDIR/versions.log" | sed 's/  */ /g' | paste -sd ';' -)
  if [ "$rc" = 0 ] && ! grep -q "MISMATCH" "$LOGDIR/versions.log"; then record versions ok "$LIBRARY_VERSIONS"
  else record versions "$(verdict_for "$rc")" "rc $rc: ${LIBRARY_VERSIONS:-see versions.log}"; fi
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

section_cuda_tests() {
  say "the [cuda] tests but [nccl] (CUDA_LAUNCH_BLOCKING=1)"
  local t0 rc=0; t0=$(date +%s)
  # "~[nccl]": NCCL's start-up has no timeout of its own; section_nccl_tests runs those apart.
  CUDA_LAUNCH_BLOCKING=1 run_capped "$(cap_of cuda_tests)" "$BUILD/engine_cuda_tests" "~[nccl]" --durations yes \
      > "$LOGDIR/cuda_tests.log" 2>&1 || rc=$?
  # Failures in full (Catch2 prints them between rules), then the totals.
  grep -v -E "^[0-9.]+ s: " "$LOGDIR/cuda_tests.log" | tail -150
  local totals; totals=$(grep -E "^(All tests passed|test cases:)" "$LOGDIR/cuda_tests.log" | tail -1)
  if [ "$rc" = 77 ]; then record cuda_tests FAILED "$(grep -o 'SKIPPED.*' "$LOGDIR/cuda_tests.log" | head -1)"
  elif [ "$rc" = 0 ] && [ -n "$totals" ]; then record cuda_tests ok "$totals ($(( $(date +%s) - t0 )) s)"
  elif [ "$rc" = 0 ]; then record cuda_tests FAILED "exit 0 without Catch2 totals (see cuda_tests.log)"
  else record cuda_tests "$(verdict_for "$rc")" "rc $rc: ${totals:-no Catch2 totals (crash or timeout)}"; fi
}

# The [nccl] cases (a one-rank communicator), last in call 1 and under their own short cap: a
# start-up that stalls in the VM costs this line only. NCCL_SOCKET_IFNAME=lo: one rank needs no
# other interface; NCCL_DEBUG=INFO: a stall shows the last step it reached. No
# CUDA_LAUNCH_BLOCKING: blocking launches can deadlock NCCL's kernels against its proxy thread.
section_nccl_tests() {
  say "the [nccl] tests (NCCL_SOCKET_IFNAME=lo, NCCL_DEBUG=INFO)"
  local t0 rc=0 log="$LOGDIR/nccl_tests.log"; t0=$(date +%s)
  NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO run_capped "$(cap_of nccl_tests)" "$BUILD/engine_cuda_tests" "[nccl]" \
      --durations yes > "$log" 2>&1 || rc=$?
  tail -40 "$log"
  local totals last
  totals=$(grep -E "^(All tests passed|test cases:)" "$log" | tail -1)
  last=$(grep -E "NCCL (INFO|WARN)" "$log" | tail -1 | cut -c1-200)
  if grep -q "No test cases matched" "$log"; then record nccl_tests skipped "no [nccl] cases: built without NCCL"
  elif [ "$rc" = 77 ]; then record nccl_tests FAILED "$(grep -o 'SKIPPED.*' "$log" | head -1)"
  elif [ "$rc" = 0 ] && [ -n "$totals" ]; then record nccl_tests ok "$totals ($(( $(date +%s) - t0 )) s)"
  elif [ "$rc" = 0 ]; then record nccl_tests FAILED "exit 0 without Catch2 totals; last NCCL line: ${last:-none}"
  else
    local v; v=$(verdict_for "$rc")
    if [ "$v" = FAILED ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; }; then
      record nccl_tests FAILED "stalled past its $(cap_of nccl_tests) s cap; last NCCL line: ${last:-none}"
    else record nccl_tests "$v" "rc $rc: ${totals:-no Catch2 totals}; last NCCL line: ${last:-none}"; fi
  fi
}

section_cpu_tests() {
  say "ctest: the CPU suite"
  local rc=0
  run_capped 200 cmake --build "$BUILD" --parallel "$(nproc)" > "$LOGDIR/build_all.log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then record cpu_tests "$(verdict_for "$rc")" "build of the CPU suite: rc $rc"; return 0; fi
  run_capped "$(cap_of cpu_tests)" ctest --test-dir "$BUILD" --output-on-failure --parallel "$(nproc)" -E '^cuda_(nccl_)?tests$' \
      --timeout 240 --output-junit "$LOGDIR/ctest_cpu.xml" > "$LOGDIR/ctest_cpu.log" 2>&1 || rc=$?
  grep -E "tests passed|tests failed|\*\*\*|Failed|Total Test time" "$LOGDIR/ctest_cpu.log" | tail -40
  local p f s; read -r p f s <<< "$(junit_counts "$LOGDIR/ctest_cpu.xml")"
  if [ "$rc" = 0 ]; then record cpu_tests ok "passed $p, failed $f, skipped $s"
  else record cpu_tests "$(verdict_for "$rc")" "rc $rc: passed $p, failed $f, skipped $s"; fi
}

sanitize_with() {  # sanitize_with SECTION TOOL SPEC
  local name="$1" tool="$2" spec="$3" rc=0
  say "compute-sanitizer $tool on $spec"
  if ! command -v compute-sanitizer >/dev/null 2>&1; then record "$name" skipped "compute-sanitizer not installed"; return 0; fi
  run_capped "$(cap_of "$name")" compute-sanitizer --tool "$tool" --error-exitcode 99 "$BUILD/engine_cuda_tests" "$spec" \
      > "$LOGDIR/sanitizer_$tool.log" 2>&1 || rc=$?
  tail -6 "$LOGDIR/sanitizer_$tool.log"
  # gVisor machines refuse the sanitizer outright ("Device not supported"): not our failure.
  if grep -q -E "Device not supported|not supported on this|Unable to find injection|No attachable process" \
       "$LOGDIR/sanitizer_$tool.log"; then record "$name" skipped "$tool unsupported on this machine"
  elif [ "$rc" = 0 ]; then record "$name" ok "$tool clean"
  elif [ "$rc" = 124 ] || [ "$rc" = 125 ]; then record "$name" not-run "$tool incomplete (over its time; slow, not wrong)"
  else record "$name" FAILED "$tool rc $rc (see sanitizer_$tool.log)"; fi
}
section_sanitizer() { sanitize_with sanitizer memcheck "[sanitize]"; }
section_racecheck() { sanitize_with racecheck racecheck "[sanitize]~cuBLASLt*"; }  # our shared-memory kernels

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

summary_of() {  # summary_of JSONL PRECISION: one line from the trainer's JSON summary
  python3 - "$1" "$2" <<'PY'
import json, sys
line = [l for l in open(sys.argv[1]) if '"event":"summary"' in l][-1]
s = json.loads(line)
print(f"{sys.argv[2]} {s['test_accuracy']:.2f}% {s['images_per_s']:.0f} img/s {s['peak_bytes'] / 2**20:.0f} MiB;")
PY
}

# The default recipe in each precision, EPOCHS epochs: test accuracy, images/s, peak memory.
# PRECISIONS in order (fp16, the headline, first), each in what the earlier ones left of the
# section's cap: only the first has the whole cap, so only it can be a hang (FAILED); a later
# one cut short ran out of time (not-run).
section_train() {
  say "trainer: the default recipe in $PRECISIONS (in that order), $EPOCHS epochs"
  ensure_data
  local p rows="" verdict=ok end first=1
  end=$(( $(date +%s) + $(cap_of train) ))
  for p in $PRECISIONS; do
    local log="$LOGDIR/train_$p.jsonl" rc=0
    rm -f "$log"
    run_capped $(( end - $(date +%s) )) "$BUILD/trainer" --device cuda --precision "$p" --epochs "$EPOCHS" "${DATA_ARGS[@]}" \
        --log "$log" > "$LOGDIR/train_$p.log" 2>&1 || rc=$?
    [ "$first" = 1 ] || SHORTENED=1
    first=0
    tail -8 "$LOGDIR/train_$p.log"
    if [ "$rc" = 0 ] && grep -q '"event":"summary"' "$log" 2>/dev/null; then rows="$rows $(summary_of "$log" "$p")"
    else
      local v; v=$(verdict_for "$rc"); rows="$rows $p: $v (rc $rc);"
      [ "$v" = FAILED ] && verdict=FAILED
      [ "$v" = not-run ] && [ "$verdict" = ok ] && verdict=not-run
    fi
  done
  record train "$verdict" "${DATA_WHERE}:${rows}"
}

# PyTorch on the same data and recipe (the engine's decoded cache, data on the GPU), then the
# comparison table against section_train's logs. MODE: eager or compile.
pytorch_side_by_side() {
  local name="$1" mode="$2"
  say "PyTorch $mode AMP side-by-side (simplecnn, $EPOCHS epochs)"
  if ! "${TORCH_PY[@]}" -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
    record "$name" skipped "no PyTorch with CUDA here"; return 0
  fi
  local cache_args=(--synthetic 20000) extra=() rc=0 out="$LOGDIR/pytorch_$mode.json"
  local u8; u8=$(find "$BUILD/cache" -maxdepth 1 -name "cifar10-*.u8" 2>/dev/null | head -1)
  [ -n "$u8" ] && cache_args=(--engine-cache "$u8")
  [ "$mode" = compile ] && extra=(--compile)
  run_capped "$(cap_of "$name")" "${TORCH_PY[@]}" "$ROOT/bench/pytorch_reference.py" --device cuda --model simplecnn \
      --precision amp-fp16 --epochs "$EPOCHS" --data-mode gpu "${cache_args[@]}" --tf32 off "${extra[@]+"${extra[@]}"}" \
      --json "$out" > "$LOGDIR/pytorch_$mode.log" 2>&1 || rc=$?
  tail -5 "$LOGDIR/pytorch_$mode.log"
  # Ours: this call's train logs, else call 1's kept on this (warm) machine by gpu_check_main.
  local ours=() f d whose="" table
  for d in "$LOGDIR" "$PREV_TRAIN"; do
    for f in "$d"/train_fp32.jsonl "$d"/train_fp16.jsonl; do [ -f "$f" ] && ours+=("$f"); done
    [ ${#ours[@]} -gt 0 ] && { [ "$d" = "$PREV_TRAIN" ] && whose=" (ours from an earlier call)"; break; }
  done
  table="table in compare_$mode.md$whose"
  [ ${#ours[@]} -gt 0 ] || table="no table: no train logs of ours on this machine (a fresh one: add train to GPU_CHECK_ONLY)"
  if [ "$rc" = 0 ] && [ -f "$out" ] && [ ${#ours[@]} -gt 0 ]; then
    python3 "$ROOT/bench/compare.py" "${ours[@]}" "$out" --json "$LOGDIR/compare_$mode.json" | tee "$LOGDIR/compare_$mode.md"
  fi
  if [ "$rc" = 0 ]; then record "$name" ok "$mode AMP ran; $table"
  else record "$name" "$(verdict_for "$rc")" "$mode rc $rc (see pytorch_$mode.log)"; fi
}
section_pytorch() { pytorch_side_by_side pytorch eager; }

# Our airbench94 recipe in FP16 (AMP: FP32 masters, the loss scaler) beside airbench's own
# package (airbench94, pure FP16 weights) on this GPU, both on our CIFAR-10 JPEG copy (theirs
# reads it as the train.pt / test.pt its loader expects). The package is a yardstick only:
# --prepare puts its source in .gpu_deps/airbench; it needs torchvision, which the image may lack.
section_airbench() {
  say "airbench94: ours (--recipe airbench94, fp16) beside airbench's package"
  ensure_data
  local cap half rc1=0 rc2=0 ours theirs
  cap=$(cap_of airbench); half=$((cap / 2))
  run_capped "$half" "$BUILD/trainer" --recipe airbench94 --device cuda --precision fp16 "${DATA_ARGS[@]}" \
      --log "$LOGDIR/airbench_ours.jsonl" > "$LOGDIR/airbench_ours.log" 2>&1 || rc1=$?
  tail -4 "$LOGDIR/airbench_ours.log"
  ours=$(grep -o "TTA accuracy .* s (whitening" "$LOGDIR/airbench_ours.log" | sed 's/ (whitening//')
  [ "$rc1" = 0 ] && [ -n "$ours" ] || ours="ours: $(verdict_for "$rc1") (rc $rc1, airbench_ours.log)"
  if [ ! -d "$DEPS/airbench" ]; then
    theirs="theirs: not-run (no .gpu_deps/airbench: bash bench/gpu_check.sh --prepare)"
  elif [ "$DATA_WHERE" != "CIFAR-10 JPEG copy" ]; then
    theirs="theirs: not-run (no CIFAR-10 copy here)"
  else
    run_capped "$half" env "PYTHONPATH=$DEPS" "${TORCH_PY[@]}" - "$BUILD/cache" "$LOGDIR/airbench_data" "$ROOT/bench" \
        > "$LOGDIR/airbench_theirs.log" 2>&1 <<'PY' || rc2=$?
import glob, os, sys, time
import torch
cache, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
sys.path.insert(0, sys.argv[3])  # our bench/: the engine cache's reader
import pytorch_reference
s = pytorch_reference.load_engine_cache(sorted(glob.glob(os.path.join(cache, "cifar10-*.u8")))[-1])
# Its loader reads cifar10/train.pt and cifar10/test.pt below the working folder; our cache is
# sorted by class and it whitens from the first 5,000 images, so the training set is shuffled
# once (fixed seed) as the official files are.
os.makedirs(os.path.join(out, "cifar10"), exist_ok=True)
os.chdir(out)
perm = torch.randperm(len(s.train_y), generator=torch.Generator().manual_seed(0))
classes = pytorch_reference.CLASSES
torch.save({"images": s.train_x[perm].clone(), "labels": s.train_y[perm].clone(), "classes": classes}, "cifar10/train.pt")
torch.save({"images": s.test_x.clone(), "labels": s.test_y.clone(), "classes": classes}, "cifar10/test.pt")
import airbench
hyp = airbench.lib_airbench94.hyp
loader = airbench.CifarLoader("cifar10", train=True, batch_size=hyp["opt"]["batch_size"], aug=hyp["aug"], altflip=True)
t0 = time.perf_counter()
model = airbench.lib_airbench94.train94(loader, verbose=False)  # returns the trained net
seconds = time.perf_counter() - t0  # one run, its first: compilation and cuDNN's search included
acc = airbench.evaluate(model, airbench.CifarLoader("cifar10", train=False, batch_size=2000), tta_level=2)
print(f"THEIRS {100 * acc:.2f}% in {seconds:.2f} s (one run, start-up included)")
PY
    tail -3 "$LOGDIR/airbench_theirs.log"
    theirs=$(grep -o "THEIRS .*" "$LOGDIR/airbench_theirs.log" | sed 's/THEIRS/theirs/')
    [ "$rc2" = 0 ] && [ -n "$theirs" ] ||
      theirs="theirs: $(verdict_for "$rc2") (rc $rc2: $(grep -m1 -oE "(ModuleNotFoundError|Error).*" "$LOGDIR/airbench_theirs.log" | cut -c1-120))"
  fi
  local v=ok
  [ "$rc1" = 0 ] || v=$(verdict_for "$rc1")
  record airbench "$v" "ours $ours; $theirs"
}
section_compile() { pytorch_side_by_side compile compile; }

# Our linear/conv vs direct cuBLASLt/cuDNN calls, memory-bound kernels vs copy bandwidth (quick
# mode), and the training-step benchmark; the summary row gives the ratio ranges.
section_bench() {
  say "benchmarks: bench_kernels --quick and bench_train on the GPU"
  local rc1=0 rc2=0 cap half
  cap=$(cap_of bench); half=$((cap / 2))
  run_capped "$half" "$BUILD/bench_kernels" --device cuda --quick --json "$LOGDIR/bench_kernels.json" \
      > "$LOGDIR/bench_kernels.log" 2>&1 || rc1=$?
  local v1; v1=$(verdict_for "$rc1")  # now: verdict_for reads the SHORTENED of the last run
  grep -E "^ +(gemm|conv) .* fwd|copy of" "$LOGDIR/bench_kernels.log" | head -20
  run_capped "$half" "$BUILD/bench_train" --device cuda --steps 20 --json "$LOGDIR/bench_train.json" \
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
  local v2; v2=$(verdict_for "$rc2")
  if [ "$v1" = ok ] && [ "$v2" = ok ]; then record bench ok "$detail"
  elif [ "$v1" = FAILED ] || [ "$v2" = FAILED ]; then record bench FAILED "rc bench_kernels $rc1, bench_train $rc2; $detail"
  else record bench not-run "out of time (rc $rc1, $rc2); $detail"; fi
}

# resnet9 for 4 epochs with augmentation in our fp32 and fp16 and PyTorch eager AMP (the
# FP16-vs-FP32 speed/memory claim on a ResNet; accuracy after 4 epochs).
section_resnet() {
  say "resnet9: 4 epochs, ours fp32/fp16 vs PyTorch eager AMP"
  ensure_data
  local p rc bad=0 files=() per
  per=$(( $(cap_of resnet) / 3 ))
  for p in fp32 fp16; do
    rc=0
    run_capped "$per" "$BUILD/trainer" --device cuda --model resnet9 --precision "$p" --epochs 4 --augment \
        "${DATA_ARGS[@]}" --log "$LOGDIR/resnet9_$p.jsonl" > "$LOGDIR/resnet9_$p.log" 2>&1 || rc=$?
    tail -3 "$LOGDIR/resnet9_$p.log"
    if [ "$rc" = 0 ]; then files+=("$LOGDIR/resnet9_$p.jsonl"); else bad=1; fi
  done
  if "${TORCH_PY[@]}" -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
    local cache_args=(--synthetic 20000) u8
    u8=$(find "$BUILD/cache" -maxdepth 1 -name "cifar10-*.u8" 2>/dev/null | head -1)
    [ -n "$u8" ] && cache_args=(--engine-cache "$u8")
    rc=0
    run_capped "$per" "${TORCH_PY[@]}" "$ROOT/bench/pytorch_reference.py" --device cuda --model resnet9 --precision amp-fp16 \
        --epochs 4 --augment --data-mode gpu "${cache_args[@]}" --tf32 off --json "$LOGDIR/pytorch_resnet9.json" \
        > "$LOGDIR/pytorch_resnet9.log" 2>&1 || rc=$?
    tail -3 "$LOGDIR/pytorch_resnet9.log"
    if [ "$rc" = 0 ]; then files+=("$LOGDIR/pytorch_resnet9.json"); else bad=1; fi
  fi
  [ ${#files[@]} -gt 0 ] && python3 "$ROOT/bench/compare.py" "${files[@]}" > "$LOGDIR/compare_resnet9.md" 2>&1
  cat "$LOGDIR/compare_resnet9.md" 2>/dev/null
  if [ "$bad" = 0 ]; then record resnet ok "${#files[@]} runs, table in compare_resnet9.md"
  else record resnet FAILED "a run failed or ran out of time (see resnet9_*.log, pytorch_resnet9.log)"; fi
}

# The numerics flags on the GPU: a report every 2 steps (the CUDA range kernel, one read per
# report), anomaly checks on device tensors, fc1 in FP32; then an injected overflow that
# --detect-anomaly=strict must stop with its message and exit status 1.
section_numerics() {
  say "numerics: --inspect-numerics, --detect-anomaly, --fp32-layers on the GPU"
  local d="$LOGDIR/numerics" rc=0 rc2=0 reports f32 msg
  mkdir -p "$d"
  local small=(--device cuda --synthetic --synthetic-size 2000 --batch-size 128)
  run_capped 30 "$BUILD/trainer" "${small[@]}" --max-steps 4 --inspect-numerics 2 --detect-anomaly \
      --fp32-layers fc1 --log "$d/numerics.jsonl" > "$d/run.log" 2>&1 || rc=$?
  local v; v=$(verdict_for "$rc")
  reports=$(grep -c '^numerics at step' "$d/run.log")
  f32=$(grep -cE '^  fc1 +Linear +f32' "$d/run.log")
  run_capped 20 "$BUILD/trainer" "${small[@]}" --max-steps 2 --detect-anomaly=strict --init-scale 1e30 \
      > "$d/strict.log" 2>&1 || rc2=$?
  msg=$(grep -c 'anomaly: step 1: cast backward in layer (outside the model)' "$d/strict.log")
  tail -3 "$d/run.log"
  local detail="run rc $rc, $reports reports, fc1 f32 in $f32; strict overflow rc $rc2, message found $msg"
  if [ "$rc" = 0 ] && [ "$reports" = 2 ] && [ "$f32" = 2 ] && [ "$rc2" = 1 ] && [ "$msg" = 1 ]; then
    record numerics ok "$detail"
  elif [ "$v" = not-run ]; then record numerics not-run "$detail"
  else record numerics FAILED "$detail (numerics/run.log, strict.log)"; fi
}

# Train briefly on the GPU, export, and check what users do with the file: predict on the GPU
# must give the trainer's GPU test accuracy, PyTorch must load it and agree image by image.
section_export() {
  say "export: trainer 1 epoch, --export, predict --device cuda, PyTorch on the file"
  ensure_data
  local d="$LOGDIR/export" rc=0 cap test_dir
  cap=$(cap_of export)
  mkdir -p "$d"
  test_dir=$(find "$BUILD/cifar10" -maxdepth 2 -type d -name test 2>/dev/null | head -1)
  if [ "$DATA_WHERE" = "synthetic data" ] || [ -z "$test_dir" ]; then
    record export skipped "no CIFAR-10 test folder (carry .gpu_deps with the archive)"; return 0
  fi
  run_capped $((cap / 3)) "$BUILD/trainer" --device cuda --epochs 1 "${DATA_ARGS[@]}" --checkpoint "$d/ck.bin" \
      > "$d/train.log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then record export "$(verdict_for "$rc")" "training: rc $rc (export/train.log)"; return 0; fi
  local eval32 gpu_acc cpu_acc torch_line="PyTorch: not importable" torch_ok=1 ep_rc=0 step=15
  eval32=$(run_capped $step "$BUILD/trainer" --device cuda --resume "$d/ck.bin" --eval-only "${DATA_ARGS[@]}" \
    2>>"$d/errors.log" | sed -nE 's/.*FP32 inference ([0-9.]+)%.*/\1/p')
  run_capped $step "$BUILD/trainer" --resume "$d/ck.bin" --export "$d/model.safetensors" > /dev/null 2>>"$d/errors.log"
  gpu_acc=$(run_capped $step "$BUILD/predict" --device cuda --weights "$d/model.safetensors" "$test_dir" \
    2>>"$d/errors.log" | sed -nE 's/^accuracy ([0-9.]+)%.*/\1/p')
  cpu_acc=$(run_capped $step "$BUILD/predict" --device cpu --weights "$d/model.safetensors" "$test_dir" \
    2>>"$d/errors.log" | sed -nE 's/^accuracy ([0-9.]+)%.*/\1/p')
  run_capped $step "$BUILD/predict" --device cuda --weights "$d/model.safetensors" --json "$test_dir" \
    > "$d/pred_cuda.jsonl" 2>>"$d/errors.log"
  local u8; u8=$(find "$BUILD/cache" -maxdepth 1 -name "cifar10-*.u8" 2>/dev/null | head -1)
  if "${TORCH_PY[@]}" -c "import torch" > /dev/null 2>&1 && [ -n "$u8" ]; then
    torch_line=$(run_capped 30 "${TORCH_PY[@]}" "$ROOT/bench/pytorch_eval.py" --device cuda --weights "$d/model.safetensors" \
      --engine-cache "$u8" --predictions "$d/pred_cuda.jsonl" 2>&1 | tr '\n' ' ')
    # PyTorch (FP32, no TF32) must reach our accuracy to within 5 images of 10,000: rounding
    # differences can flip only near-ties.
    python3 - "$torch_line" <<'PY' || torch_ok=0
import re, sys
m = re.findall(r"\((\d+) of (\d+)\)|(\d+) of (\d+) correct", sys.argv[1])
nums = [int(x) for t in m for x in t if x]
sys.exit(0 if len(nums) == 4 and abs(nums[0] - nums[2]) <= 5 else 1)
PY
  fi
  echo "$torch_line"
  # export_predict.sh runs our binaries (this loader path) and PyTorch (its own): a wrapper.
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec python3 "$@"\n' "$ORIG_LD_LIBRARY_PATH" > "$d/torch_python"
  chmod +x "$d/torch_python"
  TORCH_PYTHON="$d/torch_python" run_capped $((cap / 2)) bash "$ROOT/tests/export_predict.sh" "$BUILD" "$d/export_predict" \
      > "$d/export_predict.log" 2>&1 || ep_rc=$?
  tail -3 "$d/export_predict.log"
  local detail="trainer GPU FP32 ${eval32:-?}%, predict cuda ${gpu_acc:-?}%, cpu ${cpu_acc:-?}%; $torch_line; export_predict.sh rc $ep_rc"
  if [ -n "$gpu_acc" ] && [ "$gpu_acc" = "$eval32" ] && [ "$ep_rc" = 0 ] && [ "$torch_ok" = 1 ]; then record export ok "$detail"
  elif [ "$ep_rc" != 0 ] && [ "$(verdict_for "$ep_rc")" = not-run ]; then record export not-run "$detail"
  else record export FAILED "$detail"; fi
}


# ---- the plan, --prepare, --dry-run and the run ----------------------------------------------------
deps_line() {
  if [ -d "$DEPS" ]; then
    echo ".gpu_deps: present ($(ls "$DEPS" | tr '\n' ' '))"
  else
    echo ".gpu_deps: ABSENT - run 'bash bench/gpu_check.sh --prepare' here and name .gpu_deps in the call's carry (it is git-ignored); without it the build needs Catch2/stb_image installed and training uses synthetic data"
  fi
}

PLAN=() PLAN_NAME=""
# PLAN = the common sections, then call 1's (the default) or call 2's (GPU_CHECK_CALL=2), or
# those GPU_CHECK_ONLY names (in the table's order).
make_plan() {
  case "${GPU_CHECK_CALL:-1}" in
    1) PLAN=("${COMMON_SECTIONS[@]}" "${CALL1_SECTIONS[@]}") PLAN_NAME="call 1" ;;
    2) PLAN=("${COMMON_SECTIONS[@]}" "${CALL2_SECTIONS[@]}") PLAN_NAME="call 2" ;;
    *) echo "gpu_check: GPU_CHECK_CALL is 1 or 2 (a later call names its sections in GPU_CHECK_ONLY)" >&2; return 2 ;;
  esac
  [ -n "${GPU_CHECK_ONLY:-}" ] || return 0
  PLAN=() PLAN_NAME="GPU_CHECK_ONLY"
  local row name want found common
  common=$(for row in "${COMMON_SECTIONS[@]}"; do printf '%s ' "${row%%|*}"; done)
  for row in "${ALL_SECTIONS[@]}"; do
    name="${row%%|*}"
    case " $common${GPU_CHECK_ONLY} " in *" $name "*) PLAN+=("$row") ;; esac
  done
  # Section names that exist nowhere are a typo: say so rather than run less than asked.
  for want in $GPU_CHECK_ONLY; do
    found=0
    for row in "${ALL_SECTIONS[@]}"; do [ "${row%%|*}" = "$want" ] && found=1; done
    if [ "$found" = 0 ]; then echo "gpu_check: unknown section '$want' in GPU_CHECK_ONLY" >&2; return 2; fi
  done
}

names_of() {  # names_of ROW...: the section names, space-separated
  local row; for row in "$@"; do printf '%s ' "${row%%|*}"; done | sed 's/ $//'
}

dry_run() {
  echo "gpu_check plan (dry run: nothing is run): ${PLAN_NAME}, budget ${BUDGET} s, build dir ${BUILD#"$ROOT"/}"
  deps_line
  local total row name cap what
  total=$(caps_sum "${PLAN[@]}")
  for row in "${PLAN[@]}"; do
    IFS='|' read -r name cap what <<< "$row"
    [ "$name" = build ] && what="cmake --build: $(build_targets)"
    printf '  %-11s cap %4s s  call %-5s  %s\n' "$name" "$cap" "$(call_of "$name")" "$what"
  done
  if [ "$total" -le "$BUDGET" ]; then echo "caps add up to ${total} s, within the ${BUDGET} s budget"
  else echo "caps add up to ${total} s, over the ${BUDGET} s budget: the sections that no longer fit are reported not-run"; fi
  echo "device call: timeout_s $((BUDGET + TIMEOUT_MARGIN)) (the budget + ${TIMEOUT_MARGIN} s), carry [\".gpu_deps\"]"
  echo "\$OUT gets summary.md, console.log, logs.tar.gz and fail_<section>.log for up to ${MAX_FAIL_LOGS} failed sections, after every section"
  local common all1 all2
  common=$(names_of "${COMMON_SECTIONS[@]}")
  all1=$(caps_sum "${COMMON_SECTIONS[@]}" "${CALL1_SECTIONS[@]}")
  all2=$(caps_sum "${COMMON_SECTIONS[@]}" "${CALL2_SECTIONS[@]}")
  echo "which call runs what (each device call: timeout_s $((BUDGET + TIMEOUT_MARGIN)), carry [\".gpu_deps\"]; every call runs $common first):"
  echo "  call 1: bash bench/gpu_check.sh                   $(names_of "${CALL1_SECTIONS[@]}"); caps ${all1} s of ${BUDGET} s"
  echo "  call 2: GPU_CHECK_CALL=2 bash bench/gpu_check.sh  $(names_of "${CALL2_SECTIONS[@]}"); caps ${all2} s of ${BUDGET} s (an incremental build on the still-warm machine)"
  echo "  later:  GPU_CHECK_ONLY=\"$(names_of "${EXTRA_SECTIONS[@]}")\" (any subset; its --dry-run adds up their caps)"
}

prepare() {
  mkdir -p "$DEPS/include/catch2" "$DEPS/include/stb"
  ok=1
  for pair in "/usr/include/catch2/catch.hpp:$DEPS/include/catch2/catch.hpp" \
              "/usr/include/stb/stb_image.h:$DEPS/include/stb/stb_image.h"; do
    src="${pair%%:*}" dst="${pair#*:}"
    if [ -f "$src" ]; then cp "$src" "$dst" && echo "copied $src -> ${dst#"$ROOT"/}"
    else echo "missing $src (install catch2 / libstb-dev here first)" >&2; ok=0; fi
  done
  # airbench's package source (pure Python), the GPU section's yardstick; the machine there
  # reaches no registry. Never part of the project: .gpu_deps is git-ignored.
  if [ ! -d "$DEPS/airbench" ]; then
    local tmp; tmp=$(mktemp -d)
    if pip download airbench==0.1.8 --no-deps --no-binary :all: -d "$tmp" > "$tmp/pip.log" 2>&1 &&
       tar -xzf "$tmp"/airbench-*.tar.gz -C "$tmp" && cp -r "$tmp"/airbench-*/airbench "$DEPS/airbench"; then
      echo "copied airbench 0.1.8's source -> .gpu_deps/airbench"
    else echo "note: could not fetch airbench's source (no registry?); the airbench section will say not-run"; fi
    rm -rf "$tmp"
  fi
  # The CIFAR-10 archive for the training section (about 20 MB).
  archive="$ROOT/../shared/data/cifar10-jpeg.tar.gz"
  if [ -f "$archive" ]; then cp "$archive" "$DEPS/" && echo "copied $archive -> .gpu_deps/"
  else echo "note: no $archive; the training section will use synthetic data"; fi
  [ "$ok" = 1 ] || return 1
  du -sh "$DEPS"
  echo "now call the device with carry [\".gpu_deps\"] (it is git-ignored, so it travels only when named)"
  return 0
}

# A signal (the device call's time limit, Ctrl-C): stop the command in flight, record the
# section it cut and those never started, publish, exit with the signal's code.
on_signal() {
  [ -n "$RUN_PID" ] && kill -TERM "$RUN_PID" 2>/dev/null
  echo "gpu_check: stopped by a signal" >&3
  local row
  [ -s "$CURRENT" ] && record "$(cut -d'|' -f1 "$CURRENT")" not-run "cut short by a signal"
  : > "$CURRENT"
  for row in "${PLAN[@]}"; do recorded "${row%%|*}" || record "${row%%|*}" not-run "not started: stopped by a signal"; done
  [ -n "${TICKER:-}" ] && kill "$TICKER" 2>/dev/null
  publish
  exit "$1"
}

# An earlier call's train logs (call 1's, on a machine still warm) outlive its log folder:
# call 2's PyTorch table compares with them. A call that trained replaces them.
keep_train_logs() {
  # Only whole runs (a summary line): a log cut short by a killed call would give a wrong table.
  local whole=()
  mapfile -t whole < <(grep -l '"event":"summary"' "$LOGDIR"/train_*.jsonl 2>/dev/null)
  [ ${#whole[@]} -gt 0 ] || return 0
  rm -rf "$PREV_TRAIN" && mkdir -p "$PREV_TRAIN" && cp "${whole[@]}" "$PREV_TRAIN/"
}

# The sections of the plan in order, each timed, its verdict recorded and $OUT refreshed after
# it; a ticker refreshes $OUT every PUBLISH_EVERY seconds while a section runs.
gpu_check_main() {
  keep_train_logs
  rm -rf "$LOGDIR"  # a warm machine may hold an earlier call's logs and tables
  mkdir -p "$LOGDIR"
  if [ -n "${OUT:-}" ] && [ ! -d "$OUT" ]; then echo "gpu_check: OUT=$OUT is not a folder: nothing will come back"; fi
  COMMIT="${GPU_CHECK_COMMIT:-}"
  if [ -z "$COMMIT" ]; then
    COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "unknown (no .git; set GPU_CHECK_COMMIT)")
    if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then COMMIT="$COMMIT+dirty"; fi
  fi
  # tee ignores the signals that stop a call, so the script can still say what it was doing.
  exec > >(trap '' TERM INT; exec tee -p -a "$LOGDIR/console.log") 2>&1
  exec 3>&1  # the console, for the trap (a section's own redirection may be in force then)
  local row name later
  TICKER=""
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && command -v flock > /dev/null 2>&1; then
    # Its output to /dev/null: its sleep would otherwise hold the console pipe open after exit.
    ( while sleep "$PUBLISH_EVERY"; do publish; done ) > /dev/null 2>&1 &
    TICKER=$!
  fi
  # A signal (the device call's time limit): say which section it cut, publish, stop.
  trap 'on_signal 143' TERM
  trap 'on_signal 130' INT
  for row in "${PLAN[@]}"; do
    name="${row%%|*}"
    if [ "$(left)" -lt 10 ]; then record "$name" not-run "out of the ${BUDGET} s budget"; continue; fi
    echo "$name|$(date +%s)" > "$CURRENT"
    publish
    if ! "section_$name"; then
      # A section the others depend on stops them; they are reported not-run.
      case "$name" in
        env|configure|build)
          recorded "$name" || record "$name" FAILED "stopped without a verdict"
          for later in "${PLAN[@]}"; do
            recorded "${later%%|*}" || record "${later%%|*}" not-run "needs $name"
          done
          : > "$CURRENT"
          break ;;
      esac
    fi
    recorded "$name" || record "$name" FAILED "ended without a verdict"
    : > "$CURRENT"
    publish
  done
  : > "$CURRENT"
  [ -n "$TICKER" ] && kill "$TICKER" 2>/dev/null
  trap - TERM INT
  # The comparison tables (ours vs PyTorch, and each precision vs its own FP32), then the summary.
  local f
  for f in compare_eager.md compare_compile.md compare_resnet9.md; do
    if [ -s "$LOGDIR/$f" ]; then say "comparison: $f"; cat "$LOGDIR/$f"; fi
  done
  say "gpu_check summary"
  write_summary | sed -n '3,$p' | sed '/^## compare/,$d'
  if any_failed; then echo "RESULT: FAIL"; else echo "RESULT: PASS"; fi
  publish
  if any_failed; then return 1; fi
  return 0
}

# Sourced (by the tests): functions only.
if [[ "${BASH_SOURCE[0]}" != "$0" ]]; then return 0; fi
case "${1:-}" in
  --prepare) prepare; exit $? ;;
  --dry-run) make_plan || exit 2; dry_run; exit 0 ;;
  "") make_plan || exit 2; gpu_check_main; exit $? ;;
  *) echo "gpu_check: unknown argument '$1' (use --prepare, --dry-run or nothing)" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# bench/gpu_check.sh without a GPU: its plan (--dry-run: the order, which call runs what, each
# call's caps within its budget), the driver verdict, the cudart link folder for a pip nvcc, the
# library folders it exports, the [cuda] run without its [nccl] cases and those on their own line
# (a stall there is that line's FAILED and no more), the training order (fp16 first), and what
# comes back from the device call ($OUT): written after every section and by its ticker, at most
# 8 plain files under 16 MiB, also when the run is stopped by a signal or killed outright in the
# middle of a section. Sections and binaries are replaced by stand-ins.
#   tests/gpu_check_selftest.sh WORKDIR
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${1:?usage: gpu_check_selftest.sh WORKDIR}"
rm -rf "$work" && mkdir -p "$work"
script="$root/bench/gpu_check.sh"
fails=0
pass() { echo "ok: $*"; }
fail() { echo "FAILED: $*"; fails=$((fails + 1)); }
check() { local what="$1"; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

# ---- the plan -------------------------------------------------------------------------------------
plan=$(bash "$script" --dry-run)
check "dry run prints the timeout_s to pass (budget 330 + 30)" grep -q "timeout_s 360" <<< "$plan"
check "the first call's budget is 330 s" grep -q "budget 330 s" <<< "$plan"
check "compute-sanitizer is not in the first call" bash -c '! grep -qE "^  sanitizer " <<< "$1"' _ "$plan"
check "call 1's order: env, configure, build, versions, cuda_tests, train, nccl_tests" \
  test "$(sed -nE 's/^  ([a-z_]+) +cap.*/\1/p' <<< "$plan" | paste -sd' ' -)" = \
       "env configure build versions cuda_tests train nccl_tests"
check "call 1's caps add up to no more than its budget" \
  bash -c 'n=$(sed -nE "s/^caps add up to ([0-9]+) s, within the 330 s budget$/\1/p" <<< "$1"); [ -n "$n" ] && [ "$n" -le 330 ]' _ "$plan"
check "call 1 builds only the [cuda] binary and the trainer" grep -qE "^  build +cap +[0-9]+ s  call every +cmake --build: engine_cuda_tests trainer$" <<< "$plan"
check "each of call 1's own sections says call 1" \
  test "$(grep -cE "^  (cuda_tests|train|nccl_tests) +cap +[0-9]+ s  call 1 " <<< "$plan")" = 3
check "the [cuda] run leaves out [nccl]; those run with NCCL_SOCKET_IFNAME=lo" \
  bash -c 'grep -qE "^  cuda_tests .*~\[nccl\]" <<< "$1" && grep -qE "^  nccl_tests .*NCCL_SOCKET_IFNAME=lo .*\"\[nccl\]\"" <<< "$1"' _ "$plan"
check "fp16 trains first" grep -qE "^  train .*--precision \{fp16 fp32\}" <<< "$plan"
check "the dry run says which call runs what" \
  bash -c 'grep -qE "^  call 1: bash bench/gpu_check.sh +cuda_tests train nccl_tests; caps [0-9]+ s of 330 s$" <<< "$1" &&
           grep -qE "^  call 2: GPU_CHECK_CALL=2 bash bench/gpu_check.sh +pytorch airbench bench; caps [0-9]+ s of 330 s" <<< "$1" &&
           grep -qE "^  later: +GPU_CHECK_ONLY=\"sanitizer .*export\"" <<< "$1"' _ "$plan"
plan_call2=$(GPU_CHECK_CALL=2 bash "$script" --dry-run)
check "call 2: env, configure, build, versions, pytorch, airbench, bench" \
  test "$(sed -nE 's/^  ([a-z_]+) +cap.*/\1/p' <<< "$plan_call2" | paste -sd' ' -)" = \
       "env configure build versions pytorch airbench bench"
check "call 2's caps add up to no more than its budget" \
  bash -c 'n=$(sed -nE "s/^caps add up to ([0-9]+) s, within the 330 s budget$/\1/p" <<< "$1"); [ -n "$n" ] && [ "$n" -le 330 ]' _ "$plan_call2"
check "call 2 builds the trainer and the benchmarks" grep -qE "cmake --build: trainer bench_kernels bench_train$" <<< "$plan_call2"
GPU_CHECK_CALL=3 bash "$script" --dry-run > /dev/null 2>&1
check "GPU_CHECK_CALL=3 is refused (exit 2)" test $? = 2
plan2=$(GPU_CHECK_ONLY="sanitizer" bash "$script" --dry-run)
check "GPU_CHECK_ONLY=sanitizer adds it after the build" grep -qE "^  sanitizer +cap" <<< "$plan2"
GPU_CHECK_ONLY="bogus" bash "$script" --dry-run > /dev/null 2>&1
check "an unknown section is refused (exit 2)" test $? = 2

# The functions, for the unit checks below (sourcing runs nothing).
# shellcheck source=../bench/gpu_check.sh
GPU_CHECK_BUILD="$work/build" source "$script"

# ---- the driver verdict ------------------------------------------------------------------------------
check "driver 580 with CUDA 13.0 runs nvcc 13.0" test -z "$(driver_verdict 580.159.03 13.0 13.0)"
v=$(driver_verdict 535.104.05 12.2 13.0)
check "driver 535 (CUDA 12.2) with nvcc 13.0: one verdict line" \
  bash -c '[ "$(wc -l <<< "$1")" = 1 ] && grep -q "driver 535.104.05 supports CUDA up to 12.2" <<< "$1" && grep -q ">= 580" <<< "$1"' _ "$v"
check "driver 575 without a CUDA version, nvcc 13.0: too old" grep -q "older than CUDA 13.0 needs (>= 580)" <<< "$(driver_verdict 575.51.02 "" 13.0)"
check "no driver at all: a verdict" grep -q "no NVIDIA driver answered" <<< "$(driver_verdict "" "" 13.0)"

# ---- cudart for a pip nvcc -----------------------------------------------------------------------------
mk_toolkit() {  # mk_toolkit DIR FILE...: a fake toolkit with bin/nvcc and lib/FILEs
  mkdir -p "$1/bin" "$1/lib"; : > "$1/bin/nvcc"; chmod +x "$1/bin/nvcc"
  local f d="$1"; shift
  for f in "$@"; do : > "$d/lib/$f"; done
}
mk_toolkit "$work/tk_full" libcudart.so.13 libcudart.so libcudart_static.a
cudart_link_fix "$work/tk_full/bin/nvcc" "$work/link_full" > /dev/null
check "a complete toolkit needs no link folder" bash -c '[ ! -e "$1" ] && [ -z "$2" ] && [ "$3" = 0 ]' _ \
  "$work/link_full" "$CUDA_FIX_FLAGS" "${#CUDA_FIX_CMAKE[@]}"
mk_toolkit "$work/tk_pip" libcudart.so.13 libcublasLt.so.13 libcublas.so.13
cudart_link_fix "$work/tk_pip/bin/nvcc" "$work/link_pip" > /dev/null
check "pip nvcc: libcudart.so in the link folder points at libcudart.so.13" \
  test "$(readlink -f "$work/link_pip/libcudart.so")" = "$(readlink -f "$work/tk_pip/lib/libcudart.so.13")"
check "pip nvcc: libcublasLt.so made beside it" test -L "$work/link_pip/libcublasLt.so"
check "pip nvcc: CMake is told CUDA_CUDART" test "${CUDA_FIX_CMAKE[*]}" = "-DCUDA_CUDART=$work/link_pip/libcudart.so"
check "pip nvcc: CUDA flags link the folder and the shared runtime" test "$CUDA_FIX_FLAGS" = "-L$work/link_pip -cudart shared"
check "pip nvcc: host links see the folder" test "$CUDA_FIX_LDFLAGS" = "-L$work/link_pip"
mk_toolkit "$work/tk_nostatic" libcudart.so.13 libcudart.so
cudart_link_fix "$work/tk_nostatic/bin/nvcc" "$work/link_nostatic" > /dev/null
check "unversioned but no static library: shared runtime only, no folder" \
  bash -c '[ "$1" = "-cudart shared" ] && [ ! -e "$2" ]' _ "$CUDA_FIX_FLAGS" "$work/link_nostatic"
mk_toolkit "$work/tk_split"
mkdir -p "$work/pip_runtime" && : > "$work/pip_runtime/libcudart.so.13"
cudart_link_fix "$work/tk_split/bin/nvcc" "$work/link_split" "$work/pip_runtime" > /dev/null
check "cudart from a separate pip folder is found there" \
  test "$(readlink -f "$work/link_split/libcudart.so")" = "$(readlink -f "$work/pip_runtime/libcudart.so.13")"
mk_toolkit "$work/tk_none"
cudart_link_fix "$work/tk_none/bin/nvcc" "$work/link_none" > /dev/null
check "no libcudart anywhere: an error" test $? = 1

# ---- LD_LIBRARY_PATH: the folders CMake linked, real paths, once each -----------------------------
mkdir -p "$work/libs/cudnn" "$work/libs/cublas" "$work/libs/links"
: > "$work/libs/cudnn/libcudnn.so.9"; : > "$work/libs/cublas/libcublasLt.so.13"; : > "$work/libs/cublas/libcublas.so.13"
ln -sf "$work/libs/cublas/libcublasLt.so.13" "$work/libs/links/libcublasLt.so"
cat > "$work/CMakeCache.txt" <<EOF
CUDNN_LIBRARY:FILEPATH=$work/libs/cudnn/libcudnn.so.9
CUDA_cublasLt_LIBRARY:FILEPATH=$work/libs/links/libcublasLt.so
CUDA_cublas_LIBRARY:FILEPATH=$work/libs/cublas/libcublas.so.13
NCCL_LIBRARY:FILEPATH=NCCL_LIBRARY-NOTFOUND
CUDA_CUDART:FILEPATH=$work/libs/nonexistent/libcudart.so
EOF
check "the library folders CMake used, symlinks resolved, no duplicates" \
  test "$(runtime_library_dirs "$work/CMakeCache.txt" | paste -sd: -)" = "$work/libs/cublas:$work/libs/cudnn"

# ---- call 2's PyTorch table: call 1's train logs outlive its log folder ----------------------------
mkdir -p "$LOGDIR" && echo '{"event":"summary"}' > "$LOGDIR/train_fp16.jsonl"
keep_train_logs
check "a call that trained leaves its train logs for the next" test -s "$PREV_TRAIN/train_fp16.jsonl"
rm -f "$LOGDIR"/train_*.jsonl
keep_train_logs
check "a call that did not train keeps the earlier ones" test -s "$PREV_TRAIN/train_fp16.jsonl"
echo '{"event":"step"}' > "$LOGDIR/train_fp32.jsonl"  # a run cut short: no summary
keep_train_logs
check "a log cut short is not kept (nor does it replace the whole one)" \
  bash -c '[ ! -e "$1/train_fp32.jsonl" ] && [ -s "$1/train_fp16.jsonl" ]' _ "$PREV_TRAIN"

# ---- sections against stand-in binaries -------------------------------------------------------------
# section_with NAME DIR CAP [MODE...]: runs section NAME alone (its cap CAP s) with stand-ins for
# the trainer and engine_cuda_tests in DIR; each logs its arguments (and NCCL_SOCKET_IFNAME) to
# DIR/calls and does what its MODE says: the trainer "hang_fp16", "hang_fp32" or nothing; the
# test binary "hang" (an NCCL start-up that never ends), "nomatch" (no [nccl] case) or passes.
# Prints the section's summary row.
section_with() {
  local name="$1" dir="$2" cap="$3"; shift 3
  rm -rf "$dir" && mkdir -p "$dir/build"
  cat > "$dir/build/trainer" <<'EOF2'
#!/usr/bin/env bash
p="" log=""; while [ $# -gt 0 ]; do case "$1" in --precision) p="$2" ;; --log) log="$2" ;; esac; shift; done
echo "trainer $p" >> "$(dirname "$0")/../calls"
case " $FAKE_MODE " in *" hang_$p "*) exec sleep 60 ;; esac
echo '{"event":"summary","test_accuracy":50.0,"images_per_s":1000,"peak_bytes":1048576}' > "$log"
EOF2
  cat > "$dir/build/engine_cuda_tests" <<'EOF2'
#!/usr/bin/env bash
echo "tests $1 NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-}" >> "$(dirname "$0")/../calls"
case "$FAKE_MODE" in
  hang) echo "host:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>"; exec sleep 60 ;;
  nomatch) echo "No test cases matched '$1'"; echo "No tests ran"; exit 0 ;;
  *) echo "All tests passed (3 assertions in 1 test case)" ;;
esac
EOF2
  chmod +x "$dir/build/trainer" "$dir/build/engine_cuda_tests"
  FAKE_MODE="$*" GPU_CHECK_BUILD="$dir/build" bash -c '
    source "$1"
    mkdir -p "$LOGDIR"
    CAP="$3"; cap_of() { echo "$CAP"; }
    ensure_data() { DATA_ARGS=(--synthetic) DATA_WHERE="stand-in data"; }
    "section_$2" > "$LOGDIR/section.out" 2>&1
    cat "$ROWS"' _ "$script" "$name" "$cap"
}
# Those that wait for a cap run side by side (about 11 s in all).
section_with train "$work/sec_train_ok" 11 > "$work/row_train_ok" &
section_with train "$work/sec_train_fp32_hang" 11 hang_fp32 > "$work/row_train_fp32_hang" &
section_with train "$work/sec_train_fp16_hang" 11 hang_fp16 > "$work/row_train_fp16_hang" &
section_with nccl_tests "$work/sec_nccl_hang" 10 hang > "$work/row_nccl_hang" &
t0=$(date +%s)
section_with cuda_tests "$work/sec_cuda" 30 > "$work/row_cuda"
section_with nccl_tests "$work/sec_nccl_ok" 30 > "$work/row_nccl_ok"
section_with nccl_tests "$work/sec_nccl_none" 30 nomatch > "$work/row_nccl_none"
wait
waited=$(( $(date +%s) - t0 ))
check "train: fp16 first, then fp32" test "$(cut -d' ' -f2 "$work/sec_train_ok/calls" | paste -sd' ' -)" = "fp16 fp32"
check "train: both ran, ok" grep -qE '^train\|ok\|stand-in data: fp16 50.00% .* fp32 50.00%' "$work/row_train_ok"
check "train: fp32 cut by what fp16 left of the cap is not-run, not a hang" \
  grep -qE '^train\|not-run\|.*fp16 50.00%.* fp32: not-run \(rc 124\)' "$work/row_train_fp32_hang"
check "train: fp16 over the whole cap is a hang (FAILED), fp32 then not-run" \
  grep -qE '^train\|FAILED\|.*fp16: FAILED \(rc 124\); fp32: not-run' "$work/row_train_fp16_hang"
check "cuda_tests: the binary gets \"~[nccl]\"" grep -qx 'tests ~\[nccl\] NCCL_SOCKET_IFNAME=' "$work/sec_cuda/calls"
check "cuda_tests: its own row" grep -qE '^cuda_tests\|ok\|All tests passed' "$work/row_cuda"
check "nccl_tests: the binary gets \"[nccl]\" with NCCL_SOCKET_IFNAME=lo" grep -qx 'tests \[nccl\] NCCL_SOCKET_IFNAME=lo' "$work/sec_nccl_ok/calls"
check "nccl_tests: its own row" grep -qE '^nccl_tests\|ok\|All tests passed' "$work/row_nccl_ok"
check "nccl_tests: a stalled start-up is FAILED with the last NCCL line" \
  grep -qE '^nccl_tests\|FAILED\|stalled past its 10 s cap; last NCCL line: .*NCCL INFO Bootstrap' "$work/row_nccl_hang"
# A hang guard, not a speed bound: the stand-ins sleep 60 s, so anything under 55 s means the
# cap (10-11 s) ended them.
check "nccl_tests: the stall ended at its cap (the section runs took $waited s)" test "$waited" -lt 55
check "nccl_tests: a build without NCCL is skipped" grep -qE '^nccl_tests\|skipped\|' "$work/row_nccl_none"

# ---- $OUT: a run with stand-in sections ------------------------------------------------------------
# fake_run OUT SIGNAL: call 1's plan, call 2's sections and a section that hangs; sections write logs (some of
# them 20-30 MiB of random bytes) and five of them fail. While the last one hangs, the whole
# process group gets SIGNAL, as the device tool stops a call at its time limit.
fake_run() {
  local out="$1" sig="$2" log="$1.log"
  rm -rf "$out" "$log" "$work/build" && mkdir -p "$out"
  setsid bash -c '
    export GPU_CHECK_BUILD="$1/build" GPU_CHECK_PUBLISH_EVERY=1 GPU_CHECK_COMMIT=selftest OUT="$2"
    source "$3"
    big() { head -c "$2" /dev/urandom > "$1"; echo "END OF $(basename "$1")" >> "$1"; }
    section_env() { echo "env: stand-in"; record env ok "stand-in"; }
    section_configure() { echo configured > "$LOGDIR/configure.log"; record configure ok "stand-in"; }
    section_build() { big "$LOGDIR/build.log" $((20 * 1024 * 1024)); record build ok "20 MiB of log"; }
    section_versions() { echo "versions: stand-in" | tee "$LOGDIR/versions.log"; record versions FAILED "stand-in"; }
    section_cuda_tests() { big "$LOGDIR/cuda_tests.log" $((30 * 1024 * 1024)); record cuda_tests FAILED "30 MiB of log"; }
    section_train() { big "$LOGDIR/train_fp32.log" $((5 * 1024 * 1024)); big "$LOGDIR/train_fp16.log" $((5 * 1024 * 1024)); record train FAILED "stand-in"; }
    section_nccl_tests() { echo "nccl: stand-in" > "$LOGDIR/nccl_tests.log"; record nccl_tests ok "stand-in"; }
    section_pytorch() { big "$LOGDIR/pytorch_eager.log" $((5 * 1024 * 1024)); record pytorch FAILED "stand-in"; }
    section_airbench() { echo "airbench: stand-in" > "$LOGDIR/airbench_ours.log"; record airbench ok "stand-in"; }
    section_bench() { big "$LOGDIR/bench_kernels.log" $((5 * 1024 * 1024)); record bench FAILED "stand-in"; }
    section_hang() { echo "hanging"; run_capped 300 sleep 300; record hang FAILED "ran to its end"; }
    make_plan; PLAN+=("${CALL2_SECTIONS[@]}" "hang|300|sleeps")
    gpu_check_main' _ "$work" "$out" "$script" > "$log" 2>&1 &
  local pid=$! t
  # Once the hanging section has run for 3 s (the ticker copies every second), stop the group.
  for ((t = 0; t < 120; ++t)); do grep -q hanging "$log" 2>/dev/null && break; sleep 1; done
  sleep 3
  kill "-$sig" -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  sleep 1
  LEFT_RUNNING=$(ps -s "$pid" -o stat= | grep -vc "^Z")  # zombies are gone, only not yet reaped
  # What the device tool does when a command returns: end whatever of its session is left (a
  # SIGKILL does not reach the timeout of run_capped, which has its own process group).
  pkill -KILL -s "$pid" 2>/dev/null
}

check_out() {  # check_out OUT WHAT: the device tool's limits and what must be there
  local out="$1" what="$2" n big_files odd
  n=$(find "$out" -mindepth 1 | wc -l)
  check "$what: at most 8 entries in \$OUT ($n)" test "$n" -le 8
  check "$what: all plain files at the top" test "$(find "$out" -mindepth 1 ! -type f -o -mindepth 2 | wc -l)" = 0
  big_files=$(find "$out" -type f -size +16M | wc -l)
  check "$what: none over 16 MiB" test "$big_files" = 0
  odd=$(find "$out" -type f -printf '%f\n' | grep -cvE '^[A-Za-z0-9._-]+$')
  check "$what: names of letters, digits, . _ - only" test "$odd" = 0
  # A kill in the middle of a copy leaves one NAME.part beside the previous NAME.
  check "$what: at most one half-copied .part file" test "$(find "$out" -name '*.part' | wc -l)" -le 1
  check "$what: summary.md has every finished section" \
    bash -c 'for s in env configure build versions cuda_tests train nccl_tests pytorch airbench bench; do grep -qE "^\| $s +\|" "$1" || exit 1; done' _ "$out/summary.md"
  check "$what: the failed sections' logs, four of five" test "$(find "$out" -name 'fail_*.log' | wc -l)" = 4
  check "$what: fail_cuda_tests.log cut to 2 MiB, its end kept" \
    bash -c '[ "$(stat -c %s "$1")" -le $((2 * 1024 * 1024)) ] && tail -1 "$1" | grep -q "END OF cuda_tests.log"' _ "$out/fail_cuda_tests.log"
  check "$what: logs.tar.gz holds every log, each cut" \
    bash -c 'tar -tzf "$1" | grep -qx "logs/build.log" && tar -tzf "$1" | grep -qx "logs/bench_kernels.log"' _ "$out/logs.tar.gz"
  check "$what: console.log holds the output" grep -q "env: stand-in" "$out/console.log"
}

fake_run "$work/out_term" TERM
check_out "$work/out_term" "stopped by SIGTERM"
check "SIGTERM: the section in flight is reported cut short" grep -qE '^\| hang +\| not-run +\| cut short by a signal' "$work/out_term/summary.md"
check "SIGTERM: it ended at once, not when the command in flight would have (300 s)" \
  test "$(sed -nE 's/^\| wall time +\| +\| ([0-9]+) s of.*/\1/p' "$work/out_term/summary.md")" -lt 60
check "SIGTERM: the command in flight was stopped too (nothing of the run left: $LEFT_RUNNING)" test "$LEFT_RUNNING" = 0
fake_run "$work/out_kill" KILL
check_out "$work/out_kill" "killed by SIGKILL"
# The loop publishes as a section starts; only the ticker can have written a copy 2 s later.
check "SIGKILL: the ticker's copy shows the section still running, 2 s or more in" bash -c '
  started=$(sed -nE "s/^\| hang +\| running +\| started at ([0-9]+) s.*/\1/p" "$1")
  wall=$(sed -nE "s/^\| wall time +\| +\| ([0-9]+) s of.*/\1/p" "$1")
  [ -n "$started" ] && [ -n "$wall" ] && [ $((wall - started)) -ge 2 ]' _ "$work/out_kill/summary.md"

echo "gpu_check_selftest: $fails failed"
[ "$fails" = 0 ]

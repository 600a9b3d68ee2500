#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, with AddressSanitizer and UndefinedBehaviorSanitizer)
# and runs each for a bounded time from a scratch copy of its seed corpus, then replays every
# regression input. A crash, a sanitizer report, a leak, a hang (10 s per input), an input
# needing over 2 GB, or an uncaught exception fails the run; the input that did it is kept
# in the build folder and its name printed.
#   bash tests/fuzz/run.sh [BUILD_DIR] [SECONDS_PER_HARNESS]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build-fuzz}"
seconds="${2:-30}"
harnesses=(checkpoint safetensors cifar_binary image trainer_args predict_args)

if ! command -v clang++ >/dev/null 2>&1 || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing: clang (libFuzzer)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
  else
    echo "error: the fuzzers need clang with libFuzzer (apt-get install clang)" >&2
    exit 1
  fi
fi

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DENGINE_CUDA=OFF -DENGINE_MPI=OFF -DENGINE_TESTS=OFF \
  -DENGINE_FUZZ=ON -DENGINE_SANITIZE=fuzzer-no-link,address,undefined >/dev/null
cmake --build "$build" --parallel "$(nproc)" --target "${harnesses[@]/#/fuzz_}"

# UBSan's reports are fatal (halt_on_error), so the fuzzer sees them as crashes.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizers/ubsan.supp"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0"
status=0
printf '%-14s %8s %12s %10s %8s %s\n' harness seconds executions "exec/s" corpus coverage
for h in "${harnesses[@]}"; do
  work="$build/fuzz-run/$h"
  rm -rf "$work" && mkdir -p "$work/corpus"
  rc=0
  "$build/fuzz_$h" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work/corpus" "$root/tests/fuzz/corpus/$h" >"$work/log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$work/log" | tail -1)
  printf '%-14s %8s %12s %10s %8s %s\n' "$h" "$seconds" "${execs:-?}" "${rate:-?}" "$(ls "$work/corpus" | wc -l)" "${cov:-?}"
  if [ $rc != 0 ]; then
    status=1
    echo "FAILED: fuzz_$h exited $rc; its input: $(ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null | tr '\n' ' ')"
    grep -E -m 12 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x' "$work/log" || tail -20 "$work/log"
  fi
  # Every input a fuzzer once broke us with: replayed, each must now be refused cleanly.
  regress="$root/tests/fuzz/regressions/$h"
  if [ -d "$regress" ] && [ -n "$(ls -A "$regress")" ]; then
    if "$build/fuzz_$h" "$regress"/* >"$work/regressions.log" 2>&1; then
      echo "  regressions: $(ls "$regress" | wc -l) inputs replayed, none broke it"
    else
      status=1
      echo "FAILED: a regression input of fuzz_$h breaks it again"; tail -20 "$work/regressions.log"
    fi
  fi
done
exit $status

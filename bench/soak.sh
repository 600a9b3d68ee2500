#!/usr/bin/env bash
# The long soak: tests/soak.py's checks (allocator counts flat, resident memory flat) over a
# longer run than the suite's, e.g. 30,000 steps of simplecnn, or another model or precision,
# plus the speed check the suite leaves out (--check-speed): images/s of the last third against
# the first third and a fresh process, reported, and exit 1 on a drift below both. Timing on a
# shared VM varies by 30%, so run it on a quiet machine:
#   bash bench/soak.sh [BUILD_DIR] [STEPS] [extra tests/soak.py flags, e.g. --model resnet9 --precision bf16]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-30000}"
shift $(( $# < 2 ? $# : 2 ))
exec python3 "$root/tests/soak.py" "$build/trainer" "$build/soak" --steps "$steps" --log-every 100 --check-speed "$@"

#!/usr/bin/env bash
# The long soak: tests/soak.py's checks (allocator counts flat, resident memory flat, no drift
# in images/s after warm-up) over a longer run than CI's, e.g. 30,000 steps of simplecnn, or
# another model or precision:
#   bash bench/soak.sh [BUILD_DIR] [STEPS] [extra tests/soak.py flags, e.g. --model resnet9 --precision bf16]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-30000}"
shift $(( $# < 2 ? $# : 2 ))
exec python3 "$root/tests/soak.py" "$build/trainer" "$build/soak" --steps "$steps" --log-every 100 "$@"

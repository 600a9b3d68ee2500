#!/usr/bin/env bash
# Builds the engine and runs the whole test suite: bash tests/run.sh [BUILD_DIR]
# Installs the few system packages it needs when they are missing (as root, via apt-get).
# ENGINE_CUDA=AUTO|ON|OFF in the environment chooses the backend (default AUTO).
set -euo pipefail
t0=$SECONDS
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"

bash "$root/.ci/install-deps.sh"

generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DENGINE_CUDA="${ENGINE_CUDA:-AUTO}"
cmake --build "$build" --parallel "$(nproc)"

status=0
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" || status=$?
# CTest lists skipped tests without their output; show why each was skipped.
log="$build/Testing/Temporary/LastTest.log"
if [ -f "$log" ] && grep -q '^SKIPPED:' "$log"; then
  echo "Skipped, with the reason:"
  grep '^SKIPPED:' "$log" | sed 's/^/  /'
fi
echo "tests/run.sh: build and tests in $(( (SECONDS - t0) / 60 )) min $(( (SECONDS - t0) % 60 )) s on $(nproc) cores"
exit $status

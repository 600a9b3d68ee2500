#!/usr/bin/env bash
# Builds the trainer and runs it: bash models/run.sh [trainer flags...]
# Installs missing build packages (as root, via apt-get), builds into ./build, then trains
# with the given flags (defaults: the classic recipe; synthetic data when no CIFAR-10 is in
# data/cifar10 - fetch it with data/get_cifar10.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
bash "$root/.ci/install-deps.sh"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DENGINE_CUDA="${ENGINE_CUDA:-AUTO}" >/dev/null
cmake --build "$build" --target trainer --parallel "$(nproc)"
exec "$build/trainer" "$@"

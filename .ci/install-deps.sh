#!/usr/bin/env bash
# Installs the system packages the build needs (CMake, a compiler, Catch2 v2, stb_image, Open MPI)
# when they are missing, and the Python packages the export test reads our files with
# (safetensors, numpy: a few MB from PyPI). Uses apt-get as root; otherwise says what to install.
set -euo pipefail
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
[ -f /usr/include/catch2/catch.hpp ] || need+=(catch2)
[ -f /usr/include/stb/stb_image.h ] || need+=(libstb-dev)
# Open MPI: data-parallel training (mpirun) and its tests; the build works without it.
command -v mpirun >/dev/null 2>&1 || need+=(openmpi-bin)
command -v mpicxx >/dev/null 2>&1 || need+=(libopenmpi-dev)
if command -v python3 >/dev/null 2>&1 && ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  echo "Installing Python packages: safetensors numpy"
  python3 -m pip install --quiet --disable-pip-version-check safetensors numpy 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check --break-system-packages safetensors numpy || {
      # CI runs as root and must have them; elsewhere the export checks say they skipped.
      echo "warning: cannot install the Python packages safetensors and numpy (pip install safetensors numpy);" \
           "the export test's Python checks will report skipped" >&2
      [ "$(id -u)" = 0 ] && exit 1
    }
fi
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "error: missing packages: ${need[*]} (install them, e.g. sudo apt-get install ${need[*]})" >&2
  exit 1
fi

#!/usr/bin/env bash
# bench/data_parallel.sh: data-parallel throughput on this machine, side by side in one run:
# the trainer in one process (all cores as OpenMP threads) against mpirun -np 2 (the cores
# split between the ranks), same model, global batch, data and steps. Prints images/s of each
# and the ratio. CPU only (the GPU path needs a machine with several GPUs).
#   bash bench/data_parallel.sh [BUILD_DIR] [MODEL] [PRECISION]      (defaults: build simplecnn fp32)
set -euo pipefail
BUILD=${1:-build} MODEL=${2:-simplecnn} PRECISION=${3:-fp32}
TRAINER="$(cd "$BUILD" && pwd)/trainer"
[ -x "$TRAINER" ] || { echo "error: no $TRAINER (build first: bash tests/run.sh build)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "error: mpirun not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CORES=$(nproc)
ARGS=(--model "$MODEL" --precision "$PRECISION" --synthetic --synthetic-size 5120 --batch-size 256 --epochs 2
      --log-every 1000)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
rate() { sed -n 's/.*training time [0-9.]* s, \([0-9.]*\) images\/s.*/\1/p' "$1"; }
echo "model $MODEL, $PRECISION, global batch 256, 2 epochs of 5120 synthetic images, $CORES cores"
(cd "$WORK" && "$TRAINER" "${ARGS[@]}" --threads "$CORES" > one.log)
HALF=$(( CORES / 2 > 0 ? CORES / 2 : 1 ))
(cd "$WORK" && "$TRAINER" "${ARGS[@]}" --threads "$HALF" > half.log)
(cd "$WORK" && mpirun --oversubscribe -np 2 "$TRAINER" "${ARGS[@]}" --threads "$HALF" > two.log)
one=$(rate "$WORK/one.log") half=$(rate "$WORK/half.log") two=$(rate "$WORK/two.log")
echo "1 process x $CORES threads: $one images/s"
echo "1 process x $HALF threads:  $half images/s"
echo "2 ranks x $HALF threads:    $two images/s"
python3 -c "print(f'2 ranks / 1 process on the same cores: {float($two) / float($one):.2f}x; '
               f'scaling efficiency of 2 ranks over 1 rank of the same threads: {float($two) / (2 * float($half)):.0%}')"

// Batch-norm's per-channel statistics formulas, written once for the CPU reference and the
// CUDA kernels: the running estimates PyTorch keeps, and the normalising 1/sqrt(var + eps).
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace kernels {

// From the batch's mean and its sum of squared deviations m2 over `rows` values: the biased
// variance normalises the batch, the unbiased one feeds the running estimate,
// running = (1 - momentum) * running + momentum * batch.
template <class P>
ENGINE_HD void update_running_stats(P& running_mean, P& running_var, P mean, P m2, int64_t rows, P momentum) {
  const P unbiased = rows > 1 ? m2 / P(rows - 1) : m2 / P(rows);
  running_mean = (P(1) - momentum) * running_mean + momentum * mean;
  running_var = (P(1) - momentum) * running_var + momentum * unbiased;
}

template <class P> ENGINE_HD P inv_std(P var, P eps) { return P(1) / sqrt_of(var + eps); }

}  // namespace kernels

// Cross-entropy's per-row and per-element formulas, written once for the CPU reference and
// the CUDA kernels (which differ only in how they reduce over a row): log-softmax relative to
// the row maximum, label smoothing, and the gradient of each logit. A = FP32 (FP64 for FP64).
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace kernels {

// A row's loss from its log-sum-exp relative to the max (log_sum), the label's logit minus the
// max (z_label), and the mean of -logp over the k classes: (1 - eps) * nll + eps * mean.
template <class A> ENGINE_HD A ce_row_loss(A log_sum, A z_label, A mean_neg_logp, A smoothing) {
  const A nll = log_sum - z_label;
  return (A(1) - smoothing) * nll + smoothing * mean_neg_logp;
}

// A label outside [0, k) makes no loss term: it is counted instead.
ENGINE_HD bool ce_label_ok(int32_t label, int64_t k) { return label >= 0 && label < k; }

// dlogit[j] = (p[j] - target[j]) * scale, target = (1 - eps) * onehot(label) + eps / k, with
// scale = g / rows, or NaN when the forward counted bad labels (so the step is skipped).
template <class A> ENGINE_HD A ce_grad(A prob, int64_t j, int32_t label, int64_t k, A smoothing, A scale) {
  const A target = smoothing / A(k) + (j == label ? A(1) - smoothing : A(0));
  return (prob - target) * scale;
}

}  // namespace kernels

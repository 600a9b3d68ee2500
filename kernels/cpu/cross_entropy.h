// CPU reference cross-entropy: log-softmax + NLL with label smoothing, always computed in
// FP32 (or FP64 for FP64 logits) whatever the logits' storage type, because exp() of FP16
// logits overflows and log() of tiny FP16 probabilities loses everything.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/loss_math.h"
#include "kernels/numeric.h"
#include "kernels/shapes.h"

namespace kernels::cpu {

// *loss = mean over rows of (1 - eps) * -logp[label] + eps * mean_k(-logp[k]); probs (rows x
// k, in A) saved for backward. *bad_labels (may be null) = the number of rows whose label is
// outside [0, k); when there are any, *loss is NaN. The contract of the CUDA twin.
template <class T, class A = acc_t<T>>
void cross_entropy_forward(int64_t rows, int64_t k, const T* logits, const int32_t* labels, A smoothing, A* probs,
                           A* loss, int* bad_labels, Stream = nullptr) {
  int64_t bad = 0;
  A total = 0;
#pragma omp parallel for reduction(+ : total, bad) if (rows * k > (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    const T* z = logits + r * k;
    A mx = A(z[0]);
    for (int64_t j = 1; j < k; ++j) mx = A(z[j]) > mx ? A(z[j]) : mx;
    A sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(A(z[j]) - mx);
    // Kept relative to the max: mx + log(sum) would round at the logits' magnitude (2^-8
    // at 6e4) and lose that much absolute accuracy in every log-probability.
    const A log_sum = std::log(sum);
    A neg = 0;
    for (int64_t j = 0; j < k; ++j) {
      const A logp = (A(z[j]) - mx) - log_sum;
      probs[r * k + j] = std::exp(logp);
      neg -= logp;
    }
    const int32_t y = labels[r];
    if (!ce_label_ok(y, k)) {
      ++bad;
      continue;
    }
    total += ce_row_loss(log_sum, A(z[y]) - mx, neg / A(k), smoothing);
  }
  *loss = bad ? A(NAN) : rows ? total / A(rows) : A(0);
  if (bad_labels) *bad_labels = static_cast<int>(bad);
}

// dlogits = (*g) * (probs - target) / rows, target = (1 - eps) * onehot + eps / k; every
// gradient NaN when the forward counted bad labels (bad_labels may be null).
template <class T, class A = acc_t<T>>
void cross_entropy_backward(int64_t rows, int64_t k, const A* probs, const int32_t* labels, A smoothing, const A* g,
                            const int* bad_labels, T* glogits, Stream = nullptr) {
  const A scale = (bad_labels && *bad_labels) ? A(NAN) : *g / A(rows);
#pragma omp parallel for if (rows * k > (1 << 14))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j)
      glogits[r * k + j] = from_acc<T>(ce_grad(probs[r * k + j], j, labels[r], k, smoothing, scale));
}

}  // namespace kernels::cpu

// CPU reference cross-entropy: log-softmax + NLL with label smoothing, always computed in
// FP32 (or FP64 for FP64 logits) whatever the logits' storage type, because exp() of FP16
// logits overflows and log() of tiny FP16 probabilities loses everything.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/numeric.h"

namespace kernels::cpu {

// loss = mean over rows of (1 - eps) * -logp[label] + eps * mean_k(-logp[k]).
// Saves probs (rows x k, in A) for backward. Returns the number of labels out of [0, k).
template <class T, class A = acc_t<T>>
int64_t cross_entropy_forward(int64_t rows, int64_t k, const T* logits, const int32_t* labels, A smoothing,
                              A* probs, A* loss) {
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
    A mean_neg_logp = 0;
    for (int64_t j = 0; j < k; ++j) {
      const A logp = (A(z[j]) - mx) - log_sum;
      probs[r * k + j] = std::exp(logp);
      mean_neg_logp -= logp;
    }
    mean_neg_logp /= A(k);
    const int32_t y = labels[r];
    if (y < 0 || y >= k) { ++bad; continue; }
    const A nll = log_sum - (A(z[y]) - mx);
    total += (A(1) - smoothing) * nll + smoothing * mean_neg_logp;
  }
  *loss = rows ? total / A(rows) : A(0);
  return bad;
}

// dlogits = g * (probs - target) / rows, target = (1 - eps) * onehot + eps / k.
template <class T, class A = acc_t<T>>
void cross_entropy_backward(int64_t rows, int64_t k, const A* probs, const int32_t* labels, A smoothing, A g,
                            T* glogits) {
  const A scale = g / A(rows);
  const A off = smoothing / A(k);
#pragma omp parallel for if (rows * k > (1 << 14))
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const A target = off + (j == labels[r] ? A(1) - smoothing : A(0));
      glogits[r * k + j] = from_acc<T>((probs[r * k + j] - target) * scale);
    }
  }
}

}  // namespace kernels::cpu

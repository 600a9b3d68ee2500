// CUDA cross-entropy, the twin of kernels/cpu/cross_entropy.h: log-softmax + NLL with label
// smoothing in A = acc_t<T> (FP32 for FP16/BF16/FP32 logits, FP64 for FP64), probabilities
// saved for backward. Nothing is read back to the host: the loss and the count of bad
// labels land in device memory, and backward reads its incoming gradient (the loss scale)
// from a device pointer.
#pragma once

#include <cstdint>

#include "kernels/cuda/context.h"
#include "kernels/numeric.h"

namespace kernels::cuda {

// *loss = mean over rows of (1 - eps) * -logp[label] + eps * mean_k(-logp[k]); probs [rows, k].
// *bad_labels (device int, may be null) = the number of rows whose label is outside [0, k)
// (overwritten); when there are any, *loss is NaN. The same contract as the CPU twin.
// Deterministic: per-row losses are summed by a fixed tree.
template <class T, class A = acc_t<T>>
void cross_entropy_forward(int64_t rows, int64_t k, const T* logits, const int32_t* labels, A smoothing, A* probs,
                           A* loss, int* bad_labels, cudaStream_t stream);
// glogits = (*g) * (probs - target) / rows, target = (1 - eps) * onehot + eps / k; g is a
// device scalar (the loss scale in mixed precision training). When bad_labels (the forward's
// count, may be null) is non-zero every gradient is NaN instead, so the found-inf check skips
// the step rather than apply an update computed from a label out of range.
template <class T, class A = acc_t<T>>
void cross_entropy_backward(int64_t rows, int64_t k, const A* probs, const int32_t* labels, A smoothing, const A* g,
                            const int* bad_labels, T* glogits, cudaStream_t stream);

}  // namespace kernels::cuda

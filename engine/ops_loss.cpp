// The loss: log-softmax + NLL with label smoothing, in FP32 (FP64 for FP64 logits).
#include "engine/ops.h"
#include "engine/ops_internal.h"
#include "kernels/cpu/loss.h"

#ifdef ENGINE_WITH_CUDA
#include "kernels/cuda/data.h"
#include "kernels/cuda/loss.h"
#endif

namespace engine {

namespace kc = kernels::cpu;
#ifdef ENGINE_WITH_CUDA
namespace kcu = kernels::cuda;
#endif

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing) {
  check_float("cross_entropy", logits, "logits");
  check_defined("cross_entropy", labels, "labels");
  ENGINE_CHECK(logits.ndim() == 2, "cross_entropy: logits must be [N,K], got " << logits.desc());
  ENGINE_CHECK(labels.dtype() == DType::I32 && labels.shape() == Shape{logits.dim(0)},
               "cross_entropy: labels must be i32[" << logits.dim(0) << "], got " << labels.desc());
  ENGINE_CHECK(labels.device() == logits.device(), "cross_entropy: labels on " << labels.device().str()
                                                                                << ", logits on " << logits.device().str());
  ENGINE_CHECK(label_smoothing >= 0.0 && label_smoothing < 1.0,
               "cross_entropy: label smoothing " << label_smoothing << " is outside [0, 1)");
  const int64_t rows = logits.dim(0), k = logits.dim(1);
  const DType ad = acc_dtype(logits.dtype());
  Tensor loss = Tensor::empty({1}, ad, logits.device());
  Tensor probs = Tensor::empty({rows, k}, ad, logits.device());
  // On the GPU nothing waits for the host: rows with a label out of range are counted on the
  // device, the loss becomes NaN (the trainer's log shows it) and so does the gradient backward
  // starts from, so every gradient is NaN and the step is skipped (loss scaler) or refused
  // (the finite check) instead of applying an update computed from a bad label.
  Tensor bad;
  ENGINE_ON_CUDA(logits, ENGINE_DISPATCH_CUDA(logits.dtype(), "cross_entropy", T, {
    bad = Tensor::empty({1}, DType::I32, logits.device());
    kcu::cross_entropy_forward<T, float>(rows, k, logits.data<T>(), labels.data<int32_t>(),
                                         static_cast<float>(label_smoothing), probs.data<float>(), loss.data<float>(),
                                         bad.data<int32_t>(), cuda_stream());
    kcu::nan_if_flagged(loss.data<float>(), bad.data<int32_t>(), cuda_stream());
  }))
  ENGINE_DISPATCH_FLOAT(logits.dtype(), "cross_entropy", T, {
    using A = kernels::acc_t<T>;
    const int64_t bad = kc::cross_entropy_forward<T, A>(rows, k, logits.data<T>(), labels.data<int32_t>(),
                                                        A(label_smoothing), probs.data<A>(), loss.data<A>());
    ENGINE_CHECK(bad == 0, "cross_entropy: " << bad << " label(s) outside [0, " << k << ")");
  });
  if (should_record({&logits})) {
    active_tape()->record("cross_entropy", {logits}, loss,
                          [logits, labels, probs, label_smoothing, bad](const Tensor& gloss) -> std::vector<Tensor> {
      Tensor g = like(logits);
      // The incoming gradient is the loss scale (or 1); the GPU reads it where it lies, and
      // writes NaN gradients when the forward counted bad labels.
      ENGINE_ON_CUDA(logits, ENGINE_DISPATCH_CUDA(logits.dtype(), "cross_entropy backward", T,
                                                 kcu::cross_entropy_backward<T, float>(
                                                     logits.dim(0), logits.dim(1), probs.data<float>(),
                                                     labels.data<int32_t>(), static_cast<float>(label_smoothing),
                                                     gloss.data<float>(), bad.data<int32_t>(), g.data<T>(),
                                                     cuda_stream())))
      {
        const double gscalar = gloss.item();
        ENGINE_DISPATCH_FLOAT(logits.dtype(), "cross_entropy backward", T, {
          using A = kernels::acc_t<T>;
          kc::cross_entropy_backward<T, A>(logits.dim(0), logits.dim(1), probs.data<A>(), labels.data<int32_t>(),
                                           A(label_smoothing), A(gscalar), g.data<T>());
        });
      }
      return {g};
    });
  }
  return loss;
}

}  // namespace engine

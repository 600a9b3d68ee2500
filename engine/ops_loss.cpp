// The loss: log-softmax + NLL with label smoothing, in FP32 (FP64 for FP64 logits).
#include "engine/ops.h"
#include "engine/ops_internal.h"
#include "kernels/cpu/loss.h"

namespace engine {

namespace kc = kernels::cpu;

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
  require_cpu("cross_entropy", logits);
  const int64_t rows = logits.dim(0), k = logits.dim(1);
  const DType ad = acc_dtype(logits.dtype());
  Tensor loss = Tensor::empty({1}, ad, logits.device());
  Tensor probs = Tensor::empty({rows, k}, ad, logits.device());
  ENGINE_DISPATCH_FLOAT(logits.dtype(), "cross_entropy", T, {
    using A = kernels::acc_t<T>;
    const int64_t bad = kc::cross_entropy_forward<T, A>(rows, k, logits.data<T>(), labels.data<int32_t>(),
                                                        A(label_smoothing), probs.data<A>(), loss.data<A>());
    ENGINE_CHECK(bad == 0, "cross_entropy: " << bad << " label(s) outside [0, " << k << ")");
  });
  if (should_record({&logits})) {
    active_tape()->record("cross_entropy", {logits}, loss,
                          [logits, labels, probs, label_smoothing](const Tensor& gloss) -> std::vector<Tensor> {
      Tensor g = like(logits);
      const double gscalar = gloss.item();  // the loss scale (or 1) arrives here
      ENGINE_DISPATCH_FLOAT(logits.dtype(), "cross_entropy backward", T, {
        using A = kernels::acc_t<T>;
        kc::cross_entropy_backward<T, A>(logits.dim(0), logits.dim(1), probs.data<A>(), labels.data<int32_t>(),
                                         A(label_smoothing), A(gscalar), g.data<T>());
      });
      return {g};
    });
  }
  return loss;
}

}  // namespace engine

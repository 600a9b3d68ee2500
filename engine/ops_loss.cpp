// The loss: log-softmax + NLL with label smoothing, in FP32 (FP64 for FP64 logits).
#include "engine/autocast.h"
#include "engine/ops.h"
#include "engine/ops_internal.h"

namespace engine {

Tensor cross_entropy(const Tensor& logits_in, const Tensor& labels, double label_smoothing, Reduction reduction) {
  const Tensor logits = autocast_input("cross_entropy", logits_in);  // FP32 under autocast
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
  // Rows with a label out of range are counted into `bad` and make the loss NaN; backward then
  // makes every gradient NaN, so the step is skipped (loss scaler) or refused (the finite
  // check) instead of applying an update computed from a bad label. On the GPU nothing waits
  // for the count; on the CPU it is at hand, and the op refuses the labels at once.
  const Device dev = op_device("cross_entropy", {&logits, &labels});
  Tensor bad = Tensor::empty({1}, DType::I32, dev);
  ENGINE_KERNEL("cross_entropy", dev, logits.dtype(), T, {
    using A = kernels::acc_t<T>;
    K::cross_entropy_forward<T, A>(rows, k, logits.data<T>(), labels.data<int32_t>(), A(label_smoothing),
                                   probs.data<A>(), loss.data<A>(), bad.data<int32_t>(), stream);
  });
  if (dev.is_cpu()) ENGINE_CHECK(*bad.data<int32_t>() == 0, "cross_entropy: " << *bad.data<int32_t>()
                                                                              << " label(s) outside [0, " << k << ")");
  if (should_record({&logits})) {
    active_tape()->record("cross_entropy", {logits}, loss,
                          [logits, labels, probs, label_smoothing, bad, dev](const Tensor& gloss) -> std::vector<Tensor> {
      // The incoming gradient is the loss scale (or 1), read where it lies.
      Tensor g = like(logits);
      ENGINE_KERNEL("cross_entropy backward", dev, logits.dtype(), T, {
        using A = kernels::acc_t<T>;
        K::cross_entropy_backward<T, A>(logits.dim(0), logits.dim(1), probs.data<A>(), labels.data<int32_t>(),
                                        A(label_smoothing), gloss.data<A>(), bad.data<int32_t>(), g.data<T>(), stream);
      });
      return {g};
    });
  }
  // The sum is the mean times the rows, recorded as the scale op: its backward hands the
  // kernel's mean-gradient N times the incoming gradient, so each row's gradient is (p - y)
  // times it, rounded once into the logits' dtype as for the mean.
  return reduction == Reduction::Sum ? scale(loss, static_cast<double>(rows)) : loss;
}

}  // namespace engine

// Post-training INT8 quantization's arithmetic: per-output-channel symmetric weights,
// per-tensor activations (uint8 for tensors that are never negative, int8 symmetric otherwise),
// and the calibration that picks each activation's clipping threshold from observed values:
// min-max, a percentile, or the entropy (KL divergence) method TensorRT uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engine {

// real = scale * (q - zero_point); q in [0, 255] (uint8) or [-128, 127] (int8, zero_point 0).
struct ActivationQuant {
  float scale = 1;
  int32_t zero_point = 0;
  bool is_signed = false;
};

// The parameters for values in [lo, hi] clipped at `threshold` (> 0): uint8 with zero point 0
// when lo >= 0 (ReLU outputs: all 256 codes for the non-negative half), else int8 symmetric.
ActivationQuant activation_quant(float lo, float threshold);

// Symmetric per-output-channel weights: scale[j] = max |w[j][.]| / 127 (1 for an all-zero row),
// q = round(w / scale) in [-127, 127]. w is [n][k].
void quantize_weights(const float* w, int64_t n, int64_t k, int8_t* q, float* scale);

// q = clamp(round(x / scale) + zero_point) to the type's range (ties to even); and back.
void quantize(const float* x, int64_t count, const ActivationQuant& p, void* q);
void dequantize(const void* q, int64_t count, const ActivationQuant& p, float* x);

enum class CalibrationMethod { MinMax, Percentile, Entropy };
const char* calibration_method_name(CalibrationMethod m);  // "minmax", "percentile", "entropy"
// Throws engine::Error naming the choices on an unknown name.
CalibrationMethod parse_calibration_method(const std::string& name);

// Observes one tensor's values over the calibration batches in two passes: the range first,
// then a histogram of |x| in kBins bins over [0, max |x|], from which each method's threshold
// comes. Counts are integers, so the result does not depend on how the batches were split.
class RangeObserver {
 public:
  static constexpr int kBins = 2048;
  void observe_range(const float* x, int64_t count);
  void observe_histogram(const float* x, int64_t count);  // after every observe_range
  float lo() const { return lo_; }
  float hi() const { return hi_; }
  float absmax() const;
  // The clipping threshold of |x|: max |x| (minmax); the 99.99th percentile of |x|
  // (percentile); the threshold whose clipped, quantized histogram is nearest the original in KL
  // divergence (entropy, over 128 levels for int8 and 256 for uint8).
  float threshold(CalibrationMethod m) const;

 private:
  float lo_ = 0, hi_ = 0;
  bool seen_ = false;
  std::vector<int64_t> hist_;
};

// The KL divergence method on a histogram of |x| (bin i covers [i, i + 1) * width): the number
// of bins, from `levels` up, whose threshold loses least information. Exposed for its test.
int entropy_threshold_bins(const std::vector<int64_t>& hist, int levels);

}  // namespace engine

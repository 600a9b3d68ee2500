// INT8 inference of a trained model: its layers as a list of steps (batch-norm folded, each
// ReLU and residual add fused into the convolution before it), run in FP32 to calibrate the
// activations' ranges, then with u8 x s8 -> s32 kernels (kernels/cpu/int8_gemm.h) where the
// precision policy says INT8; saved to and loaded from safetensors.
#pragma once

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn.h"
#include "engine/quantize.h"
#include "kernels/cpu/int8_gemm.h"

namespace models {

// The precision policy, like autocast's op lists: which layers run in INT8 and why not the rest.
struct Int8PolicyRow {
  const char* layers;
  const char* precision;
  const char* why;
};
const std::vector<Int8PolicyRow>& int8_policy();

struct Int8Step {
  enum Kind { Conv, Linear, MaxPool, AvgPool, Flatten, Add, Relu };
  Kind kind = Conv;
  std::string name;  // the layer's path under PyTorch's names ("conv2", "1.0.body.3")
  int in = -1, out = -1, residual = -1;  // value indices; residual: added before the ReLU
  bool relu = false;
  bool int8 = false;  // Conv/Linear: runs on the integer kernels (the policy's choice)
  // Conv/Linear: FP32 weights (KRSC or [out, in]) and bias, batch-norm folded in.
  int64_t in_channels = 0, out_channels = 0, kernel = 1, stride = 1, pad = 0;
  engine::Tensor weight, bias;
  // INT8 steps: weights per output channel, packed, and the epilogue's per-channel terms.
  std::vector<int8_t> qweight;
  std::vector<float> weight_scale;
  kernels::cpu::int8::PackedWeights packed;
  // Convolutions: the input channels the kernels see, rounded up to whole quads (3 -> 4) so
  // windows are read from the padded input, not gathered; the added ones have zero weights.
  int64_t kernel_channels = 0;
  std::vector<int32_t> correction;
  std::vector<float> multiplier, offset;
  int64_t pool_kernel = 0, pool_stride = 0, pool_pad = 0;  // MaxPool
  std::string timer_name;  // convolutions, linears, max pools: their row in a kernel profile
};

struct Int8Value {
  std::string name;  // the producing step's name; "input" for the image
  float lo = 0, hi = 0, threshold = 0;  // calibrated range and clipping threshold
  bool calibrated = false;
  engine::ActivationQuant quant;
};

class Int8Net {
 public:
  // The steps of `net` (a make_model(model_name) network in eval mode with its batch-norms
  // folded; FP32). Refuses, with one line, a layer the INT8 path does not cover.
  static Int8Net from_model(engine::Module& net, const std::string& model_name);

  // Calibration: the FP32 steps over `batches` (normalised NHWC FP32), twice (ranges, then
  // histograms), then each activation's threshold by `method`; quantizes the weights.
  void calibrate(const std::vector<engine::Tensor>& batches, engine::CalibrationMethod method);
  // Thresholds of every method from the last calibration (for the comparison in the docs).
  void choose_method(engine::CalibrationMethod method);

  // Logits [batch, classes], FP32. `values`: every step's output, dequantized (int8) or as
  // computed (fp32), for the layer-by-layer comparison.
  engine::Tensor forward_fp32(const engine::Tensor& x, std::vector<engine::Tensor>* values = nullptr);
  engine::Tensor forward_int8(const engine::Tensor& x, std::vector<engine::Tensor>* values = nullptr);

  // Writes int8 weights (I8, our KRSC / NHWC-flatten layout), per-channel FP32 scales, FP32
  // biases, FP32 weights of the layers the policy keeps in FP32, and each activation's range,
  // threshold, scale and zero point; `metadata` joins the method and format in __metadata__.
  void save(const std::string& path, std::map<std::string, std::string> metadata) const;
  // The file's metadata; refuses (one line) a file whose tensors do not fit the model's steps
  // or hold a zero, negative or non-finite scale or a NaN range.
  std::map<std::string, std::string> load(const std::string& path);

  // Inference only: frees the INT8 layers' FP32 weights and unpacked codes (the kernels read the
  // packed copy); forward_fp32, save and load then refuse.
  void release_fp32_weights();
  // The bytes inference holds for weights: packed codes, per-channel terms, FP32 layers, biases.
  int64_t resident_weight_bytes() const;

  const std::vector<Int8Step>& steps() const { return steps_; }
  const std::vector<Int8Value>& values() const { return values_; }
  engine::CalibrationMethod method() const { return method_; }
  int64_t weight_bytes() const;       // as stored: int8 weights, scales, biases, FP32 layers
  int64_t fp32_weight_bytes() const;  // the same layers all in FP32
  kernels::cpu::int8::Int8Path path = kernels::cpu::int8::cpu_int8_path();

 private:
  int add_value(const std::string& name);
  int walk(engine::Module& m, const std::string& path, int in);
  void prepare();  // the packed weights and epilogue terms, from the weights and activation scales
  std::string model_name_;
  std::vector<Int8Step> steps_;
  std::vector<Int8Value> values_;
  std::vector<int> consumers_;
  std::vector<std::array<float, 3>> thresholds_;  // per value: minmax, percentile, entropy
  engine::CalibrationMethod method_ = engine::CalibrationMethod::Percentile;
  bool released_ = false;
};

// The calibration images: every (count / n)-th of `count` HWC uint8 images (each image when
// n >= count), normalised as in training, in FP32 batches of up to 128.
std::vector<engine::Tensor> calibration_batches(const uint8_t* images, int64_t count, int64_t n);

// `model` (FP32, eval mode, batch-norms not yet folded: this folds them) as an Int8Net
// calibrated on `batches`.
Int8Net quantize_model(engine::Module& model, const std::string& model_name,
                       const std::vector<engine::Tensor>& batches, engine::CalibrationMethod method);

// One line: the INT8 and FP32 layer counts, the calibration and the path, for the tools' logs.
std::string int8_summary(const Int8Net& net);

}  // namespace models

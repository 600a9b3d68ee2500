// INT8 inference (int8_net.h): building the steps from a model, calibration, the FP32 and
// INT8 forward passes, and the safetensors file.
#include "models/int8_net.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>

#include "engine/ops.h"
#include "engine/profile.h"
#include "engine/safetensors.h"
#include "engine/tape.h"
#include "models/models.h"

namespace models {

using engine::ActivationQuant;
using engine::DType;
using engine::Tensor;
namespace k8 = kernels::cpu::int8;

const std::vector<Int8PolicyRow>& int8_policy() {
  static const std::vector<Int8PolicyRow> rows = {
      {"convolutions and linear layers", "INT8 (u8 activations x s8 weights, s32 sums)",
       "nearly all the work; per-channel weight scales keep the error at the activations' step"},
      {"the first convolution (3 input channels)", "INT8, the image as int8 and 4 channels",
       "measured: in FP32 it took 40% of simplecnn's INT8 time; in INT8 it costs 0.1 points"},
      {"the last linear layer (the logits)", "FP32", "tiny, and every logit's error reaches the answer"},
      {"max pooling", "on the quantized values",
       "max commutes with a monotone quantizer: exact, so no requantization"},
      {"global average pooling", "FP32", "a mean of many values, cheap; feeds the FP32 last layer"},
      {"a residual add not fused into a convolution, a ReLU on its own", "FP32", "rare (resnet9's block)"},
  };
  return rows;
}

namespace {

// The INT8 file's format_version: 2 since the first convolution became INT8 (version 1 files,
// without the key, hold its weights as FP32).
const char* const kFormatVersion = "2";

// The zero point of a layer's input as the kernels read it (uint8): an int8 input is shifted by
// 128 on the way in (kernel_input), so its zero point 0 becomes 128.
uint8_t kernel_zero_point(const engine::ActivationQuant& q) {
  return static_cast<uint8_t>(q.is_signed ? 128 : q.zero_point);
}

// The integer kernels' input: uint8 codes, NHWC, channels in whole quads. Int8 codes are
// shifted to uint8 (zero point 128: x ^ 0x80); the added channels hold the zero point, which
// meets zero weights. One pass, only where a layer needs either.
Tensor kernel_input(const Tensor& codes, bool is_signed, int64_t channels, uint8_t zero_point) {
  const int64_t c = codes.dim(codes.ndim() - 1), pixels = codes.numel() / c;
  engine::Shape shape = codes.shape();
  shape.back() = channels;
  Tensor out = Tensor::empty(shape, DType::U8);
  const uint8_t* src = static_cast<const uint8_t*>(codes.raw());
  uint8_t* dst = out.data<uint8_t>();
  const uint8_t flip = is_signed ? 0x80 : 0;
  if (c == 3 && channels == 4) {  // the image: one 32-bit store a pixel
    const uint32_t flips = flip * 0x010101u, pad = static_cast<uint32_t>(zero_point) << 24;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < pixels; ++p) {
      const uint32_t v = ((src[3 * p] | src[3 * p + 1] << 8 | static_cast<uint32_t>(src[3 * p + 2]) << 16) ^ flips) | pad;
      std::memcpy(dst + 4 * p, &v, 4);  // little-endian: channel 0 first
    }
    return out;
  }
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < pixels; ++p) {
    for (int64_t ch = 0; ch < c; ++ch) dst[p * channels + ch] = src[p * c + ch] ^ flip;
    for (int64_t ch = c; ch < channels; ++ch) dst[p * channels + ch] = zero_point;
  }
  return out;
}

std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

// The direct children of a module, in order, from the pre-order walk of its descendants.
std::vector<std::pair<std::string, engine::Module*>> children_of(engine::Module& m) {
  std::vector<std::pair<std::string, engine::Module*>> out;
  for (const auto& [path, child] : m.named_modules())
    if (!path.empty() && path.find('.') == std::string::npos) out.push_back({path, child});
  return out;
}

// Max pooling on quantized NHWC values: exact, as max commutes with the quantizer.
template <class T>
void max_pool_bytes(const T* x, int64_t b, int64_t h, int64_t w, int64_t c, int64_t kernel, int64_t stride,
                    int64_t pad, T* y) {
  const int64_t oh = (h + 2 * pad - kernel) / stride + 1, ow = (w + 2 * pad - kernel) / stride + 1;
  if (kernel == 2 && stride == 2 && pad == 0) {  // the common case, in a loop the compiler vectorises
    // One output row at a time: the divisions once a row, not once a pixel (they cost more
    // than the 16 maxima of a 16-channel pixel).
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < b * oh; ++row) {
      const int64_t n = row / oh, oy = row % oh;
      const T* a = x + (n * h + 2 * oy) * w * c;
      const T* d = a + w * c;
      T* out = y + row * ow * c;
      for (int64_t ox = 0; ox < ow; ++ox, a += 2 * c, d += 2 * c, out += c) {
        int64_t ch = 0;
        for (; ch + 16 <= c; ch += 16)  // a fixed count: one vector, no loop set-up per pixel
          for (int64_t j = ch; j < ch + 16; ++j) out[j] = std::max(std::max(a[j], a[c + j]), std::max(d[j], d[c + j]));
        for (; ch < c; ++ch) out[ch] = std::max(std::max(a[ch], a[c + ch]), std::max(d[ch], d[c + ch]));
      }
    }
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < b * oh * ow; ++p) {
    const int64_t n = p / (oh * ow), oy = p / ow % oh, ox = p % ow;
    T* out = y + p * c;
    std::fill(out, out + c, std::numeric_limits<T>::lowest());
    for (int64_t ky = 0; ky < kernel; ++ky)
      for (int64_t kx = 0; kx < kernel; ++kx) {
        const int64_t iy = oy * stride - pad + ky, ix = ox * stride - pad + kx;
        if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
        const T* in = x + ((n * h + iy) * w + ix) * c;
        for (int64_t ch = 0; ch < c; ++ch) out[ch] = std::max(out[ch], in[ch]);
      }
  }
}

}  // namespace

int Int8Net::add_value(const std::string& name) {
  values_.push_back({});
  values_.back().name = name;
  consumers_.push_back(0);
  return static_cast<int>(values_.size()) - 1;
}

int Int8Net::walk(engine::Module& m, const std::string& path, int in) {
  const std::string name = pytorch_path(model_name_, path);
  auto step_of = [&](Int8Step::Kind kind) {
    Int8Step s;
    s.kind = kind;
    s.name = name;
    s.in = in;
    ++consumers_[in];
    s.out = add_value(name);
    return s;
  };
  if (typeid(m) == typeid(engine::Sequential)) {
    for (const auto& [child_name, child] : children_of(m)) in = walk(*child, join(path, child_name), in);
    return in;
  }
  if (auto* r = dynamic_cast<Residual*>(&m)) {
    const int shortcut = r->shortcut ? walk(*r->shortcut, join(path, "shortcut"), in) : in;
    const int body = walk(*r->body, join(path, "body"), in);
    Int8Step& last = steps_.back();
    // relu(conv(x) + shortcut): the add goes into the convolution's epilogue when it is the
    // body's last step, no ReLU comes first and nothing else reads its output.
    if (last.out == body && (last.kind == Int8Step::Conv || last.kind == Int8Step::Linear) && !last.relu &&
        last.residual < 0 && consumers_[body] == 0) {
      last.residual = shortcut;
      ++consumers_[shortcut];
      return body;
    }
    Int8Step s = step_of(Int8Step::Add);
    s.in = body;  // step_of counted `in`: count the body instead
    --consumers_[in];
    ++consumers_[body];
    s.residual = shortcut;
    ++consumers_[shortcut];
    steps_.push_back(std::move(s));
    return steps_.back().out;
  }
  if (auto* conv = dynamic_cast<engine::Conv2d*>(&m)) {
    ENGINE_CHECK(conv->groups == 1, "INT8 inference does not cover grouped convolutions (layer " << name << ")");
    Int8Step s = step_of(Int8Step::Conv);
    s.weight = conv->weight->master;
    s.out_channels = s.weight.dim(0), s.kernel = s.weight.dim(1), s.in_channels = s.weight.dim(3);
    s.stride = conv->stride, s.pad = conv->pad;
    s.bias = conv->bias ? conv->bias->master : Tensor::zeros({s.out_channels}, DType::F32);
    steps_.push_back(std::move(s));
    return steps_.back().out;
  }
  if (auto* lin = dynamic_cast<engine::Linear*>(&m)) {
    Int8Step s = step_of(Int8Step::Linear);
    s.weight = lin->weight->master;
    s.out_channels = s.weight.dim(0), s.in_channels = s.weight.dim(1);
    s.bias = lin->bias ? lin->bias->master : Tensor::zeros({s.out_channels}, DType::F32);
    steps_.push_back(std::move(s));
    return steps_.back().out;
  }
  if (typeid(m) == typeid(engine::ReLU)) {
    Int8Step* last = steps_.empty() ? nullptr : &steps_.back();
    if (last && last->out == in && last->kind != Int8Step::MaxPool && last->kind != Int8Step::Flatten &&
        last->kind != Int8Step::AvgPool && !last->relu && consumers_[in] == 0) {
      last->relu = true;  // fused into the step before: its output is the ReLU's
      return in;
    }
    Int8Step s = step_of(Int8Step::Relu);
    s.relu = true;
    steps_.push_back(std::move(s));
    return steps_.back().out;
  }
  if (auto* pool = dynamic_cast<engine::MaxPool2d*>(&m)) {
    Int8Step s = step_of(Int8Step::MaxPool);
    s.pool_kernel = pool->kernel, s.pool_stride = pool->stride, s.pool_pad = pool->pad;
    steps_.push_back(std::move(s));
    return steps_.back().out;
  }
  if (typeid(m) == typeid(engine::GlobalAvgPool)) {
    steps_.push_back(step_of(Int8Step::AvgPool));
    return steps_.back().out;
  }
  if (typeid(m) == typeid(engine::Flatten)) {
    steps_.push_back(step_of(Int8Step::Flatten));
    return steps_.back().out;
  }
  if (typeid(m) == typeid(engine::Dropout) || typeid(m) == typeid(engine::Identity)) return in;  // eval mode
  if (typeid(m) == typeid(engine::BatchNorm2d))
    ENGINE_FAIL("INT8 inference needs every batch-norm folded into its convolution; " << name << " was not");
  ENGINE_FAIL("INT8 inference does not cover layer " << name << " (" << m.describe()
                                                     << "): it covers simplecnn, resnet9, resnet18 and resnet50");
}

Int8Net Int8Net::from_model(engine::Module& net, const std::string& model_name) {
  ENGINE_CHECK(!net.training(), "Int8Net::from_model: the model must be in eval mode");
  Int8Net q;
  q.model_name_ = model_name;
  const int input = q.add_value("input");
  const int out = q.walk(net, "", input);
  ENGINE_CHECK(out == static_cast<int>(q.values_.size()) - 1 && !q.steps_.empty(),
               "INT8 inference: " << model_name << " ends without a layer");
  // The policy (int8_policy()): INT8 for every Conv/Linear but the layer that writes the logits.
  for (Int8Step& s : q.steps_)
    if (s.kind == Int8Step::Conv || s.kind == Int8Step::Linear) s.int8 = s.out != out;
  for (Int8Step& s : q.steps_) {
    if (!s.weight.defined()) continue;
    ENGINE_CHECK(s.weight.dtype() == DType::F32, "Int8Net::from_model: an FP32 model expected");
    if (!s.int8) continue;
    const int64_t k = s.weight.numel() / s.out_channels;
    s.qweight.resize(static_cast<size_t>(s.weight.numel()));
    s.weight_scale.resize(static_cast<size_t>(s.out_channels));
    engine::quantize_weights(s.weight.data<float>(), s.out_channels, k, s.qweight.data(), s.weight_scale.data());
  }
  return q;
}

Tensor Int8Net::forward_fp32(const Tensor& x, std::vector<Tensor>* values) {
  engine::NoGradScope no_grad;
  std::vector<Tensor> v(values_.size());
  v[0] = x;
  for (const Int8Step& s : steps_) {
    ENGINE_CHECK((s.kind != Int8Step::Conv && s.kind != Int8Step::Linear) || s.weight.defined(),
                 "Int8Net::forward_fp32 after release_fp32_weights");
    const Tensor& in = v[s.in];
    Tensor y;
    switch (s.kind) {
      case Int8Step::Conv: y = engine::conv2d(in, s.weight, s.bias, s.stride, s.pad); break;
      case Int8Step::Linear: y = engine::linear(in, s.weight, s.bias); break;
      case Int8Step::MaxPool: y = engine::max_pool2d(in, s.pool_kernel, s.pool_stride, s.pool_pad); break;
      case Int8Step::AvgPool: y = engine::global_avg_pool(in); break;
      case Int8Step::Flatten: y = engine::flatten(in); break;
      case Int8Step::Add:
      case Int8Step::Relu: y = in; break;  // the add and the ReLU follow
    }
    if (s.residual >= 0) y = engine::add(y, v[s.residual]);
    if (s.relu) y = engine::relu(y);
    v[s.out] = y;
  }
  Tensor logits = v.back();
  if (values) *values = std::move(v);
  return logits;
}

void Int8Net::calibrate(const std::vector<Tensor>& batches, engine::CalibrationMethod method) {
  ENGINE_CHECK(!batches.empty(), "calibration needs at least one image");
  std::vector<engine::RangeObserver> obs(values_.size());
  for (int pass = 0; pass < 2; ++pass)
    for (const Tensor& b : batches) {
      std::vector<Tensor> v;
      forward_fp32(b, &v);
      for (size_t i = 0; i < v.size(); ++i) {
        const Tensor& t = v[i];
        if (pass == 0)
          obs[i].observe_range(t.data<float>(), t.numel());
        else
          obs[i].observe_histogram(t.data<float>(), t.numel());
      }
    }
  thresholds_.assign(values_.size(), {0, 0, 0});
  for (size_t i = 0; i < values_.size(); ++i) {
    values_[i].lo = obs[i].lo(), values_[i].hi = obs[i].hi();
    values_[i].calibrated = true;
    for (int m = 0; m < 3; ++m) thresholds_[i][m] = obs[i].threshold(static_cast<engine::CalibrationMethod>(m));
  }
  choose_method(method);
}

void Int8Net::choose_method(engine::CalibrationMethod method) {
  ENGINE_CHECK(thresholds_.size() == values_.size(), "choose_method before calibrate");
  method_ = method;
  for (size_t i = 0; i < values_.size(); ++i) {
    const float t = thresholds_[i][static_cast<int>(method)];
    values_[i].threshold = t > 0 ? t : 1.f;  // an all-zero tensor: any scale writes zeros
    values_[i].quant = engine::activation_quant(values_[i].lo, values_[i].threshold);
  }
  prepare();
}

void Int8Net::prepare() {
  for (Int8Step& s : steps_) {
    // Max pooling and flattening pass the input's codes through: the output keeps its scale.
    if (s.kind == Int8Step::MaxPool || s.kind == Int8Step::Flatten) values_[s.out].quant = values_[s.in].quant;
    // The steps forward_int8 times: products and max pools (the others run as FP32 ops, which
    // time themselves).
    if (s.kind == Int8Step::Conv || s.kind == Int8Step::Linear || s.kind == Int8Step::MaxPool)
      s.timer_name = (s.kind == Int8Step::Conv ? "int8 conv2d " : s.kind == Int8Step::Linear ? "int8 linear " : "int8 max pool ") + s.name;
    if (!s.int8) continue;
    const ActivationQuant in = values_[s.in].quant, out = values_[s.out].quant;
    ENGINE_CHECK(values_[s.in].calibrated && values_[s.out].calibrated, "layer " << s.name << " is not calibrated");
    if (!released_) {  // a released net keeps its packed weights
      const int64_t k = static_cast<int64_t>(s.qweight.size()) / s.out_channels;
      const int64_t taps = s.kind == Int8Step::Conv ? s.kernel * s.kernel : 1;
      const int64_t c = s.kind == Int8Step::Conv ? (s.in_channels + 3) / 4 * 4 : s.in_channels;
      if (c == s.in_channels) {
        s.packed = k8::pack_weights(s.qweight.data(), s.out_channels, k, path);
      } else {  // zero weights for the channels added to make whole quads
        std::vector<int8_t> wide(static_cast<size_t>(s.out_channels * taps * c), 0);
        for (int64_t r = 0; r < s.out_channels * taps; ++r)
          std::memcpy(wide.data() + r * c, s.qweight.data() + r * s.in_channels, static_cast<size_t>(s.in_channels));
        s.packed = k8::pack_weights(wide.data(), s.out_channels, taps * c, path);
      }
      s.kernel_channels = c;
    }
    const int32_t zp = kernel_zero_point(in);
    const float* bias = s.bias.data<float>();
    s.correction.resize(static_cast<size_t>(s.out_channels));
    s.multiplier.resize(static_cast<size_t>(s.out_channels));
    s.offset.resize(static_cast<size_t>(s.out_channels));
    for (int64_t j = 0; j < s.out_channels; ++j) {
      s.correction[j] = -zp * s.packed.row_sums[j];
      s.multiplier[j] = in.scale * s.weight_scale[j] / out.scale;
      s.offset[j] = bias[j] / out.scale;
      ENGINE_CHECK(std::isfinite(s.multiplier[j]) && std::isfinite(s.offset[j]),
                   "layer " << s.name << ": its scales give a requantization of " << s.multiplier[j] << " x + "
                            << s.offset[j] << " for channel " << j << " (an output scale too small)");
    }
    if (s.residual >= 0) {
      const float r = values_[s.residual].quant.scale / out.scale;
      ENGINE_CHECK(std::isfinite(r), "layer " << s.name << ": residual scale / output scale is " << r);
    }
  }
}

Tensor Int8Net::forward_int8(const Tensor& x, std::vector<Tensor>* values) {
  engine::NoGradScope no_grad;
  const size_t n = values_.size();
  std::vector<Tensor> f(n), q(n);  // each value as FP32 and/or quantized, made when first needed
  f[0] = x;
  auto quantized = [&](int v) -> const Tensor& {
    if (!q[v].defined()) {
      const ActivationQuant& p = values_[v].quant;
      q[v] = Tensor::empty(f[v].shape(), p.is_signed ? DType::I8 : DType::U8);
      engine::quantize(f[v].data<float>(), f[v].numel(), p, q[v].raw());
    }
    return q[v];
  };
  auto real = [&](int v) -> const Tensor& {
    if (!f[v].defined()) {
      f[v] = Tensor::empty(q[v].shape(), DType::F32);
      engine::dequantize(q[v].raw(), q[v].numel(), values_[v].quant, f[v].data<float>());
    }
    return f[v];
  };
  // Each value is dropped after the last step that reads it (unless the caller wants them all).
  std::vector<size_t> last_read(n, 0);
  for (size_t i = 0; i < steps_.size(); ++i) {
    last_read[steps_[i].in] = i;
    if (steps_[i].residual >= 0) last_read[steps_[i].residual] = i;
  }
  auto release_inputs = [&](size_t i) {
    if (values) return;
    for (const int v : {steps_[i].in, steps_[i].residual})
      if (v >= 0 && last_read[v] == i && v != static_cast<int>(n) - 1) f[v] = q[v] = Tensor();
  };
  for (size_t i = 0; i < steps_.size(); release_inputs(i), ++i) {
    const Int8Step& s = steps_[i];
    if ((s.kind == Int8Step::Conv || s.kind == Int8Step::Linear) && s.int8) {
      const engine::KernelTimer timer(s.timer_name.c_str());  // the input's quantization included
      ENGINE_CHECK(s.kernel_channels >= s.in_channels && s.packed.n == s.out_channels,
                   "Int8Net::forward_int8 before calibrate or load (layer " << s.name << ")");
      Tensor in = quantized(s.in);
      ENGINE_CHECK(in.dim(in.ndim() - 1) == s.in_channels,
                   "layer " << s.name << " takes " << s.in_channels << " channels, got " << engine::shape_str(in.shape()));
      const bool is_signed = values_[s.in].quant.is_signed;
      const uint8_t zp_in = kernel_zero_point(values_[s.in].quant);
      if (is_signed || s.kernel_channels != s.in_channels) in = kernel_input(in, is_signed, s.kernel_channels, zp_in);
      const ActivationQuant& out_q = values_[s.out].quant;
      k8::Requant ep;
      ep.correction = s.correction.data();
      ep.multiplier = s.multiplier.data();
      ep.offset = s.offset.data();
      ep.relu = s.relu;
      ep.out_signed = out_q.is_signed;
      ep.zero_point = out_q.zero_point;
      if (s.residual >= 0) {
        const Tensor& r = quantized(s.residual);
        const ActivationQuant& rq = values_[s.residual].quant;
        ep.residual = r.raw();
        ep.residual_signed = rq.is_signed;
        ep.residual_zero_point = rq.zero_point;
        ep.residual_multiplier = rq.scale / out_q.scale;
      }
      const DType out_dtype = out_q.is_signed ? DType::I8 : DType::U8;
      if (s.kind == Int8Step::Conv) {
        ENGINE_CHECK(in.ndim() == 4, "layer " << s.name << " takes NHWC input");
        k8::ConvGeometry g;
        g.batch = in.dim(0), g.height = in.dim(1), g.width = in.dim(2), g.in_channels = s.kernel_channels;
        g.kernel = s.kernel, g.stride = s.stride, g.pad = s.pad;
        q[s.out] = Tensor::empty({g.batch, g.out_height(), g.out_width(), s.out_channels}, out_dtype);
        if (s.residual >= 0)
          ENGINE_CHECK(q[s.residual].shape() == q[s.out].shape(), "layer " << s.name << ": residual shape differs");
        k8::conv2d_u8s8(path, in.data<uint8_t>(), zp_in, g, s.packed, &ep, q[s.out].raw());
      } else {
        ENGINE_CHECK(in.ndim() == 2, "layer " << s.name << " takes [batch, features]");
        ENGINE_CHECK(zp_in == 0 || s.correction.size() > 0, "unreachable");
        q[s.out] = Tensor::empty({in.dim(0), s.out_channels}, out_dtype);
        k8::gemm_u8s8(path, in.data<uint8_t>(), in.dim(0), s.in_channels, s.packed, &ep, q[s.out].raw(),
                      s.out_channels);
      }
      continue;
    }
    switch (s.kind) {
      case Int8Step::MaxPool:
        if (!f[s.in].defined()) {  // on the codes: exact
          const engine::KernelTimer timer(s.timer_name.c_str());
          const Tensor& in = q[s.in];
          const int64_t oh = (in.dim(1) + 2 * s.pool_pad - s.pool_kernel) / s.pool_stride + 1;
          const int64_t ow = (in.dim(2) + 2 * s.pool_pad - s.pool_kernel) / s.pool_stride + 1;
          q[s.out] = Tensor::empty({in.dim(0), oh, ow, in.dim(3)}, in.dtype());
          if (in.dtype() == DType::I8)
            max_pool_bytes(static_cast<const int8_t*>(in.raw()), in.dim(0), in.dim(1), in.dim(2), in.dim(3),
                           s.pool_kernel, s.pool_stride, s.pool_pad, static_cast<int8_t*>(q[s.out].raw()));
          else
            max_pool_bytes(in.data<uint8_t>(), in.dim(0), in.dim(1), in.dim(2), in.dim(3), s.pool_kernel,
                           s.pool_stride, s.pool_pad, q[s.out].data<uint8_t>());
        } else {
          f[s.out] = engine::max_pool2d(f[s.in], s.pool_kernel, s.pool_stride, s.pool_pad);
        }
        break;
      case Int8Step::Flatten:
        if (f[s.in].defined()) f[s.out] = engine::flatten(f[s.in]);
        if (q[s.in].defined()) q[s.out] = q[s.in].view({q[s.in].dim(0), q[s.in].numel() / q[s.in].dim(0)});
        break;
      case Int8Step::AvgPool: f[s.out] = engine::global_avg_pool(real(s.in)); break;
      case Int8Step::Conv:  // the FP32 layers: ReLU in the kernel's store when no add comes first
        f[s.out] = s.relu && s.residual < 0 ? engine::conv2d_relu(real(s.in), s.weight, s.bias, s.stride, s.pad)
                                            : engine::conv2d(real(s.in), s.weight, s.bias, s.stride, s.pad);
        if (s.relu && s.residual < 0) continue;
        break;
      case Int8Step::Linear:
        f[s.out] = s.relu && s.residual < 0 ? engine::linear_relu(real(s.in), s.weight, s.bias)
                                            : engine::linear(real(s.in), s.weight, s.bias);
        if (s.relu && s.residual < 0) continue;
        break;
      case Int8Step::Add:
      case Int8Step::Relu: f[s.out] = real(s.in); break;
    }
    if (s.residual >= 0) f[s.out] = engine::add(f[s.out], real(s.residual));
    if (s.relu) f[s.out] = engine::relu(f[s.out]);
  }
  if (values) {  // what the INT8 steps read: the codes where there are codes
    values->assign(n, Tensor());
    for (size_t v = 0; v < n; ++v) {
      if (q[v].defined()) {
        (*values)[v] = Tensor::empty(q[v].shape(), DType::F32);
        engine::dequantize(q[v].raw(), q[v].numel(), values_[v].quant, (*values)[v].data<float>());
      } else {
        (*values)[v] = f[v];
      }
    }
  }
  return real(static_cast<int>(n) - 1);
}

namespace {
int64_t weight_count(const Int8Step& s) {
  // As stored: the file keeps the first convolution's 3 channels, not the kernels' 4.
  return s.int8 ? s.out_channels * (s.kind == Int8Step::Conv ? s.kernel * s.kernel : 1) * s.in_channels
                : s.weight.numel();
}
}  // namespace

int64_t Int8Net::weight_bytes() const {
  int64_t bytes = 0;
  for (const Int8Step& s : steps_) {
    if (s.kind != Int8Step::Conv && s.kind != Int8Step::Linear) continue;
    bytes += s.int8 ? weight_count(s) + 2 * 4 * s.out_channels : 4 * (weight_count(s) + s.out_channels);
  }
  return bytes;
}

int64_t Int8Net::fp32_weight_bytes() const {
  int64_t bytes = 0;
  for (const Int8Step& s : steps_)
    if (s.kind == Int8Step::Conv || s.kind == Int8Step::Linear) bytes += 4 * (weight_count(s) + s.out_channels);
  return bytes;
}

void Int8Net::release_fp32_weights() {
  for (Int8Step& s : steps_)
    if (s.int8) {
      s.weight = Tensor();
      std::vector<int8_t>().swap(s.qweight);  // the packed copy is what the kernels read
    }
  released_ = true;
}

int64_t Int8Net::resident_weight_bytes() const {
  int64_t bytes = 0;
  for (const Int8Step& s : steps_) {
    if (s.kind != Int8Step::Conv && s.kind != Int8Step::Linear) continue;
    bytes += s.int8 ? static_cast<int64_t>(s.packed.data.size() + 4 * (s.packed.row_sums.size() + s.correction.size() +
                                                                        s.multiplier.size() + s.offset.size()))
                    : 4 * s.weight.numel();
    bytes += 4 * s.out_channels;  // the bias
  }
  return bytes;
}

namespace {

Tensor floats(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::F32);
  std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

}  // namespace

void Int8Net::save(const std::string& path, std::map<std::string, std::string> metadata) const {
  ENGINE_CHECK(!released_, "Int8Net::save after release_fp32_weights");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const Int8Step& s : steps_) {
    if (s.kind != Int8Step::Conv && s.kind != Int8Step::Linear) continue;
    if (s.int8) {
      Tensor w = Tensor::empty(s.weight.shape(), DType::I8);
      std::memcpy(w.raw(), s.qweight.data(), s.qweight.size());
      tensors.push_back({s.name + ".weight", w});
      tensors.push_back({s.name + ".weight_scale", floats(s.weight_scale)});
    } else {
      tensors.push_back({s.name + ".weight", s.weight});
    }
    tensors.push_back({s.name + ".bias", s.bias});
  }
  for (size_t i = 0; i < values_.size(); ++i) {
    const Int8Value& v = values_[i];
    ENGINE_CHECK(v.calibrated, "Int8Net::save before calibration");
    tensors.push_back({v.name + ".activation_range", floats({v.lo, v.hi})});
    tensors.push_back({v.name + ".activation_scale", floats({v.quant.scale})});
    tensors.push_back({v.name + ".activation_zero_point", Tensor::from_ints({v.quant.zero_point}, {1})});
  }
  metadata["format"] = "mpcnn-int8";
  metadata["format_version"] = kFormatVersion;
  metadata["model"] = model_name_;
  metadata["calibration"] = engine::calibration_method_name(method_);
  metadata["layout"] = "weights KRSC [out, kh, kw, in]; linear columns in NHWC flatten order";
  engine::save_safetensors(path, tensors, metadata);
}

std::map<std::string, std::string> Int8Net::load(const std::string& path) {
  ENGINE_CHECK(!released_, "Int8Net::load after release_fp32_weights");
  const engine::SafetensorsFile file = engine::load_safetensors(path);
  auto meta_or = [&](const char* key) { return file.metadata.count(key) ? file.metadata.at(key) : std::string(); };
  ENGINE_CHECK(meta_or("format") == "mpcnn-int8", path << " is not an INT8 model file (no format mpcnn-int8)");
  const std::string version = meta_or("format_version");
  ENGINE_CHECK(version == kFormatVersion, path << " was written by another version of the INT8 export (format version "
                                               << (version.empty() ? "1" : version) << ", this build reads "
                                               << kFormatVersion << "): export it again with --export-dtype int8");
  ENGINE_CHECK(meta_or("model") == model_name_,
               path << " holds a " << meta_or("model") << ", not a " << model_name_);
  std::set<std::string> used;
  auto get = [&](const std::string& name, DType dtype, const engine::Shape& shape) -> const Tensor& {
    const Tensor* t = file.find(name);
    ENGINE_CHECK(t, path << ": no tensor " << name);
    ENGINE_CHECK(t->dtype() == dtype && t->shape() == shape,
                 path << ": " << name << " is " << engine::dtype_name(t->dtype()) << " " << engine::shape_str(t->shape())
                      << ", expected " << engine::dtype_name(dtype) << " " << engine::shape_str(shape));
    used.insert(name);
    return *t;
  };
  auto positive_finite = [&](const std::string& name, const float* v, int64_t count) {
    for (int64_t i = 0; i < count; ++i)
      ENGINE_CHECK(std::isfinite(v[i]) && v[i] > 0, path << ": " << name << "[" << i << "] is " << v[i]
                                                         << " (scales must be finite and positive)");
  };
  for (Int8Step& s : steps_) {
    if (s.kind != Int8Step::Conv && s.kind != Int8Step::Linear) continue;
    const int64_t out = s.out_channels;
    const Tensor& w = get(s.name + ".weight", s.int8 ? DType::I8 : DType::F32, s.weight.shape());
    if (s.int8) {
      std::memcpy(s.qweight.data(), w.raw(), s.qweight.size());
      const Tensor& scale = get(s.name + ".weight_scale", DType::F32, {out});
      positive_finite(s.name + ".weight_scale", scale.data<float>(), out);
      std::memcpy(s.weight_scale.data(), scale.data<float>(), static_cast<size_t>(out) * 4);
      // The FP32 weights the file does not hold: their dequantized values (forward_fp32, tests).
      float* wf = s.weight.data<float>();
      const int64_t k = s.weight.numel() / out;
      for (int64_t i = 0; i < s.weight.numel(); ++i) wf[i] = s.weight_scale[i / k] * s.qweight[i];
    } else {
      std::memcpy(s.weight.raw(), w.raw(), s.weight.nbytes());
      const float* wf = s.weight.data<float>();
      for (int64_t i = 0; i < s.weight.numel(); ++i)
        ENGINE_CHECK(std::isfinite(wf[i]), path << ": " << s.name << ".weight holds " << wf[i]);
    }
    const Tensor& bias = get(s.name + ".bias", DType::F32, {out});
    for (int64_t j = 0; j < out; ++j)
      ENGINE_CHECK(std::isfinite(bias.data<float>()[j]), path << ": " << s.name << ".bias[" << j << "] is not finite");
    std::memcpy(s.bias.raw(), bias.raw(), bias.nbytes());
  }
  for (size_t i = 0; i < values_.size(); ++i) {
    Int8Value& v = values_[i];
    const float* range = get(v.name + ".activation_range", DType::F32, {2}).data<float>();
    ENGINE_CHECK(std::isfinite(range[0]) && std::isfinite(range[1]) && range[0] <= range[1],
                 path << ": " << v.name << ".activation_range is [" << range[0] << ", " << range[1] << "]");
    const float scale = get(v.name + ".activation_scale", DType::F32, {1}).data<float>()[0];
    positive_finite(v.name + ".activation_scale", &scale, 1);
    const int32_t zp = get(v.name + ".activation_zero_point", DType::I32, {1}).data<int32_t>()[0];
    const bool is_signed = range[0] < 0;
    ENGINE_CHECK(is_signed ? zp == 0 : zp >= 0 && zp <= 255,
                 path << ": " << v.name << ".activation_zero_point " << zp << " is outside "
                      << (is_signed ? "int8 symmetric's 0" : "uint8's [0, 255]"));
    v.lo = range[0], v.hi = range[1];
    v.quant = {scale, zp, is_signed};
    v.threshold = scale * (is_signed ? 127.f : 255.f);
    v.calibrated = true;
  }
  for (const auto& [name, t] : file.tensors)
    ENGINE_CHECK(used.count(name), path << ": tensor " << name << " is not part of a " << model_name_);
  const std::string method = meta_or("calibration");
  method_ = engine::parse_calibration_method(method.empty() ? "minmax" : method);
  thresholds_.clear();
  prepare();
  return file.metadata;
}

std::vector<Tensor> calibration_batches(const uint8_t* images, int64_t count, int64_t n) {
  ENGINE_CHECK(count > 0 && n > 0, "calibration needs images: " << count << " available, " << n << " asked for");
  n = std::min(n, count);
  const int64_t stride = count / n, batch = 128;
  const kernels::AugmentConfig norm;  // the trainer's normalisation, no augmentation
  std::vector<Tensor> out;
  for (int64_t begin = 0; begin < n; begin += batch) {
    const int64_t b = std::min(batch, n - begin);
    Tensor u8 = Tensor::empty({b, 32, 32, 3}, DType::U8);
    for (int64_t i = 0; i < b; ++i)
      std::memcpy(u8.data<uint8_t>() + i * 3072, images + (begin + i) * stride * 3072, 3072);
    std::vector<int32_t> idx(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    Tensor x = Tensor::empty({b, 32, 32, 3}, DType::F32), y = Tensor::empty({b}, DType::I32);
    engine::make_batch(u8, Tensor::from_ints(std::vector<int32_t>(static_cast<size_t>(b), 0), {b}),
                       Tensor::from_ints(idx, {b}), false, norm, 0, 0, x, y);
    out.push_back(x);
  }
  return out;
}

Int8Net quantize_model(engine::Module& model, const std::string& model_name, const std::vector<Tensor>& batches,
                       engine::CalibrationMethod method) {
  model.eval();
  engine::fold_batch_norm(model, DType::F32);
  Int8Net q = Int8Net::from_model(model, model_name);
  q.calibrate(batches, method);
  return q;
}

std::string int8_summary(const Int8Net& net) {
  int int8 = 0, fp32 = 0;
  for (const Int8Step& s : net.steps())
    if (s.kind == Int8Step::Conv || s.kind == Int8Step::Linear) (s.int8 ? int8 : fp32)++;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%d layers INT8, %d FP32 (policy: docs/quantization.md), %s calibration, %s kernels",
                int8, fp32, engine::calibration_method_name(net.method()), kernels::cpu::int8::int8_path_name(net.path));
  return buf;
}

}  // namespace models

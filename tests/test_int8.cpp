// INT8 post-training quantization: the quantizers' round trips, per-channel weight scales, the
// calibration methods, the integer kernels against plain loops (bit for bit on every path this
// CPU has), the quantized networks against FP32 layer by layer within bounds derived from the
// scales, and the file: identical calibrations give identical bytes, a damaged file is refused.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/quantize.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "engine/tape.h"
#include "int8_cases.h"
#include "kernels/cpu/amx_tiles.h"
#include "models/int8_net.h"
#include "models/models.h"

using engine::ActivationQuant;
using engine::DType;
using engine::Tensor;
namespace k8 = kernels::cpu::int8;

TEST_CASE("int8 quantize/dequantize: round trips within half a step; the zero point keeps 0.0 exact", "[int8]") {
  for (const bool is_signed : {false, true}) {
    ActivationQuant p;
    p.is_signed = is_signed;
    p.scale = 0.0371f;
    p.zero_point = is_signed ? 0 : 17;
    const float lo = p.scale * static_cast<float>((is_signed ? -128 : 0) - p.zero_point);
    const float hi = p.scale * static_cast<float>((is_signed ? 127 : 255) - p.zero_point);
    std::vector<float> x;
    for (int i = 0; i <= 4000; ++i) x.push_back(lo + (hi - lo) * static_cast<float>(i) / 4000.f);
    x.push_back(0.f);
    std::vector<uint8_t> q(x.size());
    std::vector<float> back(x.size());
    engine::quantize(x.data(), static_cast<int64_t>(x.size()), p, q.data());
    engine::dequantize(q.data(), static_cast<int64_t>(x.size()), p, back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      INFO((is_signed ? "int8 " : "uint8 ") << "x = " << x[i]);
      // Half a step, plus the rounding of x / scale and of scale * q (a few ulps of the range).
      CHECK(std::fabs(back[i] - x[i]) <= p.scale / 2 + 4e-7f * std::fabs(hi - lo));
    }
    CHECK(q.back() == static_cast<uint8_t>(p.zero_point));
    CHECK(back.back() == 0.f);
    // Beyond the range: clamped to the end codes.
    const float outside[2] = {lo - 10.f, hi + 10.f};
    uint8_t qo[2];
    engine::quantize(outside, 2, p, qo);
    CHECK(qo[0] == (is_signed ? 0x80 : 0));
    CHECK(qo[1] == (is_signed ? 0x7f : 255));
  }
  // ReLU outputs get uint8 codes with zero point 0; a signed range int8 symmetric.
  const ActivationQuant relu = engine::activation_quant(0.f, 5.1f), sym = engine::activation_quant(-1.f, 12.7f);
  CHECK_FALSE(relu.is_signed);
  CHECK(relu.zero_point == 0);
  CHECK(relu.scale == 5.1f / 255.f);
  CHECK(sym.is_signed);
  CHECK(sym.scale == 12.7f / 127.f);
  CHECK_THROWS_WITH(engine::activation_quant(0.f, 0.f), Catch::Contains("positive threshold"));
}

TEST_CASE("int8 weights: symmetric per-output-channel scales from hand-made weights", "[int8]") {
  // Row 0: absmax 2 -> scale 2/127; 1/scale = 63.5 rounds to even (64), 0.5/scale = 31.75 -> 32.
  // Row 1: all zero -> scale 1, codes 0. Row 2: absmax 0.127 -> scale 0.001 exactly in real
  // numbers; -0.127 -> -127.
  const float w[9] = {1.f, -2.f, 0.5f, 0.f, 0.f, 0.f, 0.127f, -0.127f, 0.0004f};
  int8_t q[9];
  float scale[3];
  engine::quantize_weights(w, 3, 3, q, scale);
  CHECK(scale[0] == 2.f / 127.f);
  CHECK(scale[1] == 1.f);
  CHECK(scale[2] == 0.127f / 127.f);
  const int8_t want[9] = {64, -127, 32, 0, 0, 0, 127, -127, 0};
  for (int i = 0; i < 9; ++i) CHECK(int(q[i]) == int(want[i]));
  const float bad[2] = {1.f, NAN};
  CHECK_THROWS_WITH(engine::quantize_weights(bad, 1, 2, q, scale), Catch::Contains("is nan"));
}

TEST_CASE("int8 calibration: min-max, percentile and entropy thresholds on hand-made data", "[int8]") {
  // 300,000 values spread evenly over [0, 3) and one outlier at 100.
  std::vector<float> x;
  for (int i = 0; i < 300000; ++i) x.push_back(3.f * static_cast<float>(i) / 300000.f);
  x.push_back(100.f);
  engine::RangeObserver obs;
  obs.observe_range(x.data(), static_cast<int64_t>(x.size()));
  obs.observe_histogram(x.data(), static_cast<int64_t>(x.size()));
  CHECK(obs.threshold(engine::CalibrationMethod::MinMax) == 100.f);
  // 99.99% of |x| lies below 3 * 0.9999: the bin (width 100/2048) holding that.
  const float width = 100.f / 2048.f, pct = obs.threshold(engine::CalibrationMethod::Percentile);
  CHECK(pct >= 3.f * 0.9999f);
  CHECK(pct <= 3.f * 0.9999f + width);
  // Entropy: clipping below 3 moves mass into the last bin; above it, the outlier's bin is
  // empty in Q. So the best threshold sits where the spread ends: 3 / width = 61.4 bins, but
  // at least the 256 levels of uint8 (fewer bins than levels cannot be quantized coarser).
  CHECK(obs.threshold(engine::CalibrationMethod::Entropy) == 256 * width);
  // By hand, 2 levels on the histogram {8, 4, 2, 1}; natural logarithms:
  //   2 bins: P = {8, 7}/15, Q = {8, 4}/12:                       KL = 0.0380
  //   3 bins: P = {8, 4, 3}/15, Q = {8, 3, 3}/14 (4 + 2 spread):  KL = 0.0077
  //   4 bins: P = {8, 4, 2, 1}/15, Q = {6, 6, 1.5, 1.5}/15:       KL = 0.0566
  CHECK(engine::entropy_threshold_bins({8, 4, 2, 1}, 2) == 3);
  // KL compares shapes only: data spread evenly is matched at any threshold that keeps it
  // all (its merged levels are as even as its bins), so nothing is clipped.
  std::vector<int64_t> hist(2048, 0);
  for (int b = 0; b < 300; ++b) hist[b] = 1000;
  hist[2000] = 1;
  CHECK(engine::entropy_threshold_bins(hist, 128) > 2000);
  CHECK(engine::parse_calibration_method("entropy") == engine::CalibrationMethod::Entropy);
  CHECK_THROWS_WITH(engine::parse_calibration_method("kl"), Catch::Contains("minmax, percentile or entropy"));
}

TEST_CASE("int8 kernels, portable path: convolutions and products against plain integer loops", "[int8]") {
  int8_cases::check_conv(k8::Int8Path::Generic);
  int8_cases::check_gemm(k8::Int8Path::Generic);
}

TEST_CASE("int8 kernels on emulated AMX tiles (TDPBUSD): convolutions and products against plain loops", "[int8]") {
  int8_cases::check_conv(k8::Int8Path::AmxEmulated);
  int8_cases::check_gemm(k8::Int8Path::AmxEmulated);
}

TEST_CASE("TDPBUSD emulated: each product as the SDM's definition, int32 sums wrapping", "[int8]") {
  namespace amx = kernels::cpu::amx;
  amx::EmulatedTiles t;
  t.configure(amx::gemm_tile_config());
  alignas(64) uint8_t a[16][64], b[16][64];
  alignas(64) int32_t c[16][16];
  int8_cases::Rng rng{11};
  for (auto& row : a)
    for (auto& v : row) v = static_cast<uint8_t>(rng.next());
  for (auto& row : b)
    for (auto& v : row) v = static_cast<uint8_t>(rng.next());
  for (auto& row : c)
    for (auto& v : row)  // near the int32 edges, so that adding the products wraps
      v = rng.next() % 2 ? INT32_MAX - rng.between(0, 100000) : INT32_MIN + rng.between(0, 100000);
  t.load<0>(c, 64);
  t.load<4>(a, 64);
  t.load<6>(b, 64);
  t.dpbusd<0, 4, 6>();
  alignas(64) int32_t got[16][16];
  t.store<0>(got, 64);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      uint32_t want = static_cast<uint32_t>(c[m][n]);
      for (int k = 0; k < 64; ++k) want += static_cast<uint32_t>(int32_t{a[m][k]} * int32_t{static_cast<int8_t>(b[k / 4][4 * n + k % 4])});
      CHECK(static_cast<uint32_t>(got[m][n]) == want);
    }
}

TEST_CASE("int8 kernels: every path on this CPU writes the same bits", "[int8]") {
  const std::vector<k8::Int8Path> paths = k8::int8_paths_available();
  std::string names;
  for (k8::Int8Path p : paths) names += std::string(names.empty() ? "" : ", ") + k8::int8_path_name(p);
  WARN("INT8 paths compared on this CPU: " << names
                                           << (paths.size() == 2 ? " (no VNNI here: only the portable path and the tile emulation)" : ""));
  int8_cases::Rng rng{3};
  // Gathered windows (19 channels) and windows read from the padded input (16 channels).
  for (const int64_t cin : {19, 16}) {
    k8::ConvGeometry g;
    g.batch = 2, g.height = 9, g.width = 7, g.in_channels = cin, g.kernel = 3, g.stride = 1, g.pad = 1;
    const int64_t n = 70, k = 9 * cin, rows = 2 * 9 * 7;
    std::vector<uint8_t> x(static_cast<size_t>(2 * 9 * 7 * cin));
    for (auto& v : x) v = static_cast<uint8_t>(rng.next());
    std::vector<int8_t> w(static_cast<size_t>(n * k));
    for (auto& v : w) v = static_cast<int8_t>(rng.next());
    int8_cases::Epilogue e(rng, rows, n, k, true, true, false);
    // Channels with a NaN, +inf and -inf multiplier: the clamp (as MAXPS/MINPS) must treat them
    // alike on every path. A NaN clamps to the ReLU floor: the output zero point.
    e.make_nonfinite();
    std::vector<uint8_t> first;
    for (k8::Int8Path p : paths) {
      INFO("path " << k8::int8_path_name(p) << ", " << cin << " channels");
      const k8::PackedWeights packed = k8::pack_weights(w.data(), n, k, p);
      std::vector<uint8_t> out(static_cast<size_t>(rows * n));
      k8::conv2d_u8s8(p, x.data(), 9, g, packed, &e.ep, out.data());
      int64_t nan_channel_off = 0;
      for (int64_t m = 0; m < rows; ++m) nan_channel_off += out[static_cast<size_t>(m * n)] != e.ep.zero_point;
      CHECK(nan_channel_off == 0);
      if (first.empty())
        first = out;
      else
        CHECK(out == first);
    }
  }
}

namespace {

// The FP32 step on the INT8 pass's own (dequantized) inputs, clamped to the output's codes,
// against the INT8 step's output: the difference is this layer's error alone, bounded by
//   sum_k |x_k| s_w[j] / 2     (each weight within half its step)
// + s_out / 2                  (the output's rounding)
// + (K + 8) u (sum_k |x_k| (|w_jk| + s_w[j] / 2) + |b_j| + |r|)   (FP32 roundings, u = 2^-24)
// with ReLU and the clamp 1-Lipschitz. Returns the worst ratio of error to bound.
double layer_error_ratio(const models::Int8Step& s, const models::Int8Value& out, const std::vector<Tensor>& v) {
  const Tensor& x = v[s.in];
  const Tensor r = s.residual >= 0 ? v[s.residual] : Tensor();
  Tensor y = s.kind == models::Int8Step::Conv ? engine::conv2d(x, s.weight, s.bias, s.stride, s.pad)
                                              : engine::linear(x, s.weight, s.bias);
  if (r.defined()) y = engine::add(y, r);
  if (s.relu) y = engine::relu(y);
  // |x| convolved with |w| (per output) through the same op with absolute values.
  Tensor ax = Tensor::empty(x.shape(), DType::F32), aw = Tensor::empty(s.weight.shape(), DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) ax.data<float>()[i] = std::fabs(x.data<float>()[i]);
  for (int64_t i = 0; i < s.weight.numel(); ++i) aw.data<float>()[i] = std::fabs(s.weight.data<float>()[i]);
  const Tensor none;
  Tensor ones = Tensor::full(s.weight.shape(), 1.0, DType::F32);
  const Tensor xw = s.kind == models::Int8Step::Conv ? engine::conv2d(ax, aw, none, s.stride, s.pad) : engine::linear(ax, aw, none);
  const Tensor x1 = s.kind == models::Int8Step::Conv ? engine::conv2d(ax, ones, none, s.stride, s.pad) : engine::linear(ax, ones, none);
  const int64_t k = s.weight.numel() / s.out_channels, c = s.out_channels;
  const double u = std::ldexp(1.0, -24);
  const ActivationQuant& q = out.quant;
  const double lo = q.scale * ((q.is_signed ? -128.0 : 0.0) - q.zero_point), hi = q.scale * ((q.is_signed ? 127.0 : 255.0) - q.zero_point);
  const Tensor& got = v[s.out];
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const int64_t j = i % c;
    const double sw = s.weight_scale[j], rr = r.defined() ? std::fabs(r.data<float>()[i]) : 0.0;
    const double sum_x = x1.data<float>()[i], sum_xw = xw.data<float>()[i];
    const double bound = sum_x * sw / 2 + q.scale / 2 +
                         (k + 8) * u * (sum_xw + sum_x * sw / 2 + std::fabs(s.bias.data<float>()[j]) + rr) + 1e-30;
    const double want = std::min(hi, std::max(lo, static_cast<double>(y.data<float>()[i])));
    worst = std::max(worst, std::fabs(got.data<float>()[i] - want) / bound);
  }
  return worst;
}

Tensor random_images(int64_t n) { return engine::uniform({n, 32, 32, 3}, -1, 1, DType::F32); }

}  // namespace

TEST_CASE("int8 networks: the steps match the model in FP32; each INT8 layer within its derived bound", "[int8]") {
  for (const std::string name : {"simplecnn", "resnet9", "resnet18"}) {
    INFO(name);
    engine::manual_seed(5);
    auto net = models::make_model(name);
    net->eval();
    engine::fold_batch_norm(*net, DType::F32);
    models::Int8Net q = models::Int8Net::from_model(*net, name);
    const Tensor x = random_images(3);
    engine::NoGradScope no_grad;
    // The step list computes what the model computes (the same ops, fused differently).
    const std::vector<double> model_out = (*net)(x).to_vector(), steps_out = q.forward_fp32(x).to_vector();
    double top = 0, diff = 0;
    for (size_t i = 0; i < model_out.size(); ++i) {
      top = std::max(top, std::fabs(model_out[i]));
      diff = std::max(diff, std::fabs(model_out[i] - steps_out[i]));
    }
    CHECK(diff <= 1e-5 * top);
    // The policy: the logits' layer in FP32, the rest (the 3-channel first convolution too) INT8.
    int int8_layers = 0, fp32_layers = 0;
    for (const auto& s : q.steps())
      if (s.kind == models::Int8Step::Conv || s.kind == models::Int8Step::Linear) (s.int8 ? int8_layers : fp32_layers)++;
    CHECK(fp32_layers == 1);
    CHECK(!q.steps().back().int8);
    CHECK(int8_layers >= 2);
    q.calibrate({x}, engine::CalibrationMethod::MinMax);
    std::vector<Tensor> v;
    const Tensor logits = q.forward_int8(x, &v);
    int checked = 0;
    for (const auto& s : q.steps()) {
      if (!s.int8) continue;
      INFO("layer " << s.name);
      CHECK(layer_error_ratio(s, q.values()[s.out], v) <= 1.0);
      ++checked;
    }
    CHECK(checked == int8_layers);
    REQUIRE(logits.numel() == 30);
  }
}

TEST_CASE("int8 networks: the first convolution's channels padded to a quad give the gathered 3-channel bits",
          "[int8]") {
  // Int8Net feeds the 3-channel image to the kernels as 4 channels (the zero point, against
  // zero weights) so windows come from the padded input. The plain route on the 3 channels as
  // they are, with the unpadded weights, must give the same bytes.
  engine::manual_seed(6);
  auto net = models::make_model("simplecnn");
  net->eval();
  engine::fold_batch_norm(*net, DType::F32);
  models::Int8Net q = models::Int8Net::from_model(*net, "simplecnn");
  const Tensor x = random_images(3);
  q.calibrate({x}, engine::CalibrationMethod::Percentile);
  std::vector<Tensor> v;
  q.forward_int8(x, &v);
  const models::Int8Step& s = q.steps().front();
  REQUIRE(s.kind == models::Int8Step::Conv);
  REQUIRE(s.int8);
  REQUIRE(s.in_channels == 3);
  CHECK(s.kernel_channels == 4);
  // The codes back from the dequantized values (scale * (q - zp): exact to far below half a step).
  auto codes = [&](int value) {
    const Tensor& f = v[static_cast<size_t>(value)];
    std::vector<uint8_t> c(static_cast<size_t>(f.numel()));
    engine::quantize(f.data<float>(), f.numel(), q.values()[static_cast<size_t>(value)].quant, c.data());
    return c;
  };
  const ActivationQuant& in_q = q.values()[static_cast<size_t>(s.in)].quant;
  REQUIRE(in_q.is_signed);  // the normalised image: int8, fed to the kernels shifted by 128
  std::vector<uint8_t> image = codes(s.in);
  for (auto& b : image) b ^= 0x80;
  const ActivationQuant& out_q = q.values()[static_cast<size_t>(s.out)].quant;
  k8::Requant ep;
  ep.correction = s.correction.data(), ep.multiplier = s.multiplier.data(), ep.offset = s.offset.data();
  ep.relu = s.relu, ep.out_signed = out_q.is_signed, ep.zero_point = out_q.zero_point;
  k8::ConvGeometry g;
  g.batch = 3, g.height = 32, g.width = 32, g.in_channels = 3, g.kernel = s.kernel, g.stride = s.stride, g.pad = s.pad;
  const k8::PackedWeights plain = k8::pack_weights(s.qweight.data(), s.out_channels, s.kernel * s.kernel * 3,
                                                   k8::Int8Path::Generic);
  std::vector<uint8_t> want(static_cast<size_t>(3 * g.out_height() * g.out_width() * s.out_channels));
  k8::conv2d_u8s8(k8::Int8Path::Generic, image.data(), 128, g, plain, &ep, want.data());
  CHECK(codes(s.out) == want);
}

namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

models::Int8Net calibrated_simplecnn(engine::CalibrationMethod m) {
  engine::manual_seed(9);
  auto net = models::make_model("simplecnn");
  net->eval();
  engine::fold_batch_norm(*net, DType::F32);
  models::Int8Net q = models::Int8Net::from_model(*net, "simplecnn");
  engine::manual_seed(10);
  q.calibrate({random_images(4), random_images(2)}, m);
  return q;
}

}  // namespace

TEST_CASE("int8 file: identical calibrations give identical bytes; damaged scales and ranges are refused", "[int8]") {
  const std::string a = "int8_test_a.safetensors", b = "int8_test_b.safetensors", bad = "int8_test_bad.safetensors";
  calibrated_simplecnn(engine::CalibrationMethod::Entropy).save(a, {{"classes", "x"}});
  calibrated_simplecnn(engine::CalibrationMethod::Entropy).save(b, {{"classes", "x"}});
  REQUIRE(file_bytes(a) == file_bytes(b));

  // Loaded into a fresh model: the same logits bit for bit.
  models::Int8Net original = calibrated_simplecnn(engine::CalibrationMethod::Entropy);
  auto fresh = models::make_model("simplecnn");
  fresh->eval();
  engine::fold_batch_norm(*fresh, DType::F32);
  models::Int8Net loaded = models::Int8Net::from_model(*fresh, "simplecnn");
  const auto meta = loaded.load(a);
  CHECK(meta.at("calibration") == "entropy");
  CHECK(loaded.method() == engine::CalibrationMethod::Entropy);
  const Tensor x = random_images(2);
  const std::vector<double> want = original.forward_int8(x).to_vector();
  CHECK(loaded.forward_int8(x).to_vector() == want);
  // As predict runs it: only the packed weights kept; the same logits, and no FP32 forward.
  loaded.release_fp32_weights();
  CHECK(loaded.forward_int8(x).to_vector() == want);
  CHECK_THROWS_WITH(loaded.forward_fp32(x), Catch::Contains("after release_fp32_weights"));

  const engine::SafetensorsFile file = engine::load_safetensors(a);
  auto damaged = [&](const std::string& name, const Tensor& replacement) {
    std::vector<std::pair<std::string, Tensor>> tensors = file.tensors;
    for (auto& [n, t] : tensors)
      if (n == name) t = replacement;
    engine::save_safetensors(bad, tensors, file.metadata);
    auto m = models::make_model("simplecnn");
    m->eval();
    engine::fold_batch_norm(*m, DType::F32);
    models::Int8Net q = models::Int8Net::from_model(*m, "simplecnn");
    try {
      q.load(bad);
    } catch (const std::exception& e) {
      const std::string what = e.what();
      CHECK(what.find('\n') == std::string::npos);
      return what;
    }
    return std::string("loaded");
  };
  auto floats = [](std::vector<double> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::F32); };
  CHECK_THAT(damaged("conv2.weight_scale", floats(std::vector<double>(31, 0.01))),
             Catch::Contains("conv2.weight_scale is f32 [31], expected f32 [32]"));
  std::vector<double> scales(32, 0.01);
  scales[5] = 0;
  CHECK_THAT(damaged("conv2.weight_scale", floats(scales)), Catch::Contains("conv2.weight_scale[5] is 0"));
  scales[5] = -0.5;
  CHECK_THAT(damaged("fc1.weight_scale", floats(std::vector<double>(256, -0.5))),
             Catch::Contains("fc1.weight_scale[0] is -0.5"));
  CHECK_THAT(damaged("conv2.activation_range", floats({NAN, 3.0})), Catch::Contains("conv2.activation_range is [nan, 3]"));
  CHECK_THAT(damaged("conv2.activation_scale", floats({0.0})), Catch::Contains("conv2.activation_scale[0] is 0"));
  // A file from before the first convolution became INT8 (no format_version: version 1) is
  // refused by its version, not by the first tensor that differs.
  std::map<std::string, std::string> old_metadata = file.metadata;
  old_metadata.erase("format_version");
  engine::save_safetensors(bad, file.tensors, old_metadata);
  auto m = models::make_model("simplecnn");
  m->eval();
  engine::fold_batch_norm(*m, DType::F32);
  models::Int8Net old_reader = models::Int8Net::from_model(*m, "simplecnn");
  CHECK_THROWS_WITH(old_reader.load(bad), Catch::Contains("format version 1, this build reads 2): export it again"));
  std::remove(a.c_str());
  std::remove(b.c_str());
  std::remove(bad.c_str());
}

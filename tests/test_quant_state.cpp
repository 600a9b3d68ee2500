// 8-bit and BF16 optimizer state (engine/optim.h StateFormat, kernels/quant_math.h): the codes,
// their round-trip error per block, Adam with int8 state tracking FP32-state Adam, the bytes it
// saves, and checkpoints that carry it.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/allocator.h"
#include "engine/checkpoint.h"
#include "engine/nn.h"
#include "engine/optim.h"
#include "engine/random.h"
#include "kernels/quant_math.h"
#include "models/models.h"
#include "models/train_step.h"

using engine::DType;
using engine::StateFormat;
using engine::Tensor;

TEST_CASE("every 8-bit code decodes to a value that encodes back to it, in increasing order", "[quant]") {
  for (float absmax : {1.0f, 3.0f, 1e-20f, 6e30f}) {
    INFO("absmax " << absmax);
    float prev_s = -1, prev_u = -1;
    for (int k = 0; k < 128; ++k) {  // the signed code's magnitudes
      const float v = kernels::decode_signed(static_cast<uint8_t>(k), absmax);
      CHECK(kernels::encode_signed(v, absmax) == k);
      CHECK(kernels::decode_signed(static_cast<uint8_t>(k | 0x80), absmax) == (k ? -v : 0.0f));
      CHECK(v > prev_s);
      prev_s = v;
    }
    CHECK(prev_s == absmax);  // the largest code is the absmax itself, exactly
    for (int k = 0; k < 256; ++k) {
      const float v = kernels::decode_unsigned(static_cast<uint8_t>(k), absmax);
      CHECK(kernels::encode_unsigned(v, absmax) == k);
      CHECK(v > prev_u);
      prev_u = v;
    }
    CHECK(prev_u == absmax);
  }
  // Ratios that underflow FP32 (a decayed moment beside a large one in the same block): never a
  // large code (frexp of 0 would say "half the absmax").
  CHECK(kernels::encode_signed(1e-40f, 1e10f) == 0);
  CHECK(kernels::encode_signed(-1e-40f, 1e10f) == 0);
  CHECK(kernels::encode_unsigned(1e-40f, 1e10f) == 1);
  CHECK(kernels::encode_signed(1e-6f, 1.0f) == 0);   // below half the smallest code (1.8e-5)
  CHECK(kernels::encode_signed(1.2e-5f, 1.0f) == 1);  // nearer the smallest code than zero
}

// Rounding to the nearest code in log2 leaves a value within half a step: a factor 2^(1/16)
// (signed, 8 codes an octave) or 2^(1/32) (unsigned, 16 an octave), up to one float rounding
// of the decode (2^-24, so 1e-6 of slack). Below the codes' range (2^-15.75 and 2^-15.875 of
// the absmax) the error is at most that smallest code; unsigned values never become zero.
TEST_CASE("the block round trip stays within half a code step of every value", "[quant]") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> octave(-20.0, 0.0), sign(-1.0, 1.0);
  const double rel_s = std::pow(2.0, 1.0 / 16) - 1 + 1e-6, rel_u = std::pow(2.0, 1.0 / 32) - 1 + 1e-6;
  const double floor_s = std::pow(2.0, -15.75), floor_u = std::pow(2.0, -15.875);
  for (int block = 0; block < 200; ++block) {
    std::vector<float> x(kernels::kQuantBlock);
    const double scale = std::pow(10.0, block % 30 - 15);
    for (float& v : x) v = static_cast<float>(scale * std::pow(2.0, octave(rng)) * (sign(rng) < 0 ? -1 : 1));
    x[block % x.size()] = block % 3 == 0 ? 0.0f : x[block % x.size()];
    float a = 0;
    for (float v : x) a = std::max(a, std::fabs(v));
    for (float v : x) {
      const double ds = kernels::decode_signed(kernels::encode_signed(v, a), a);
      const double du = kernels::decode_unsigned(kernels::encode_unsigned(std::fabs(v), a), a);
      const double r = std::fabs(v) / a;
      if (r >= floor_s) REQUIRE(std::fabs(ds - v) <= rel_s * std::fabs(v));
      else REQUIRE(std::fabs(ds - v) <= floor_s * a);
      if (r >= floor_u) REQUIRE(std::fabs(du - std::fabs(v)) <= rel_u * std::fabs(v));
      else REQUIRE(std::fabs(du - std::fabs(v)) <= floor_u * a);
      if (v != 0.0f) REQUIRE(du > 0);  // Adam's sqrt(v) never collapses to 0
    }
  }
}

namespace {

// Softmax regression on fixed data with more images than features and labels no hyperplane
// separates: a convex problem with one minimum, so two optimizers that differ by rounding
// stay close instead of wandering apart along directions the loss does not see.
struct Regression {
  std::shared_ptr<engine::Sequential> net;
  std::unique_ptr<engine::Adam> opt;
  engine::LossScaler scaler{[] {
    engine::LossScalerConfig c;
    c.enabled = false;
    return c;
  }()};
  Tensor x, y;

  explicit Regression(StateFormat f) {
    engine::manual_seed(9);
    net = std::make_shared<engine::Sequential>();
    net->add(std::make_shared<engine::Linear>(32, 10));
    opt = std::make_unique<engine::Adam>(net->parameters(), 1e-2);
    opt->set_state_format(f);
    x = engine::uniform({512, 32}, -1, 1, DType::F32);
    std::vector<int32_t> labels(512);
    for (int i = 0; i < 512; ++i) labels[i] = (i * 7 + i / 3) % 10;
    y = Tensor::from_ints(labels, {512});
  }
  std::vector<double> weights() const {
    std::vector<double> w;
    for (const auto& p : net->parameters()) {
      const auto v = p->master.to_vector();
      w.insert(w.end(), v.begin(), v.end());
    }
    return w;
  }
  double step() { return models::train_step(*net, *opt, scaler, x, y, DType::F32, 0.0, 0.0).item(); }
};

double distance(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(d);
}

}  // namespace

// Adam's update is m / sqrt(v) per element: 4.4% of m and 2.2% of v give at most
// 1.044 / sqrt(1 - 0.022) - 1 = 5.6% of each step (for elements well above eps). Steps that
// differ by that much, added up without any cancellation, keep the two runs within 5.6% of the
// path length sum_t ||w_t+1 - w_t||: the bound checked, with the loss curves alongside. A broken
// code (a wrong scale, a lost sign) drifts by the order of the path itself.
TEST_CASE("Adam with int8 or BF16 state tracks FP32-state Adam over 200 steps", "[quant]") {
  for (StateFormat f : {StateFormat::Int8, StateFormat::BF16}) {
    INFO(engine::state_format_name(f));
    Regression ref(StateFormat::F32), q(f);
    double path = 0, first_loss = 0, last_ref = 0, last_q = 0;
    std::vector<double> w = ref.weights();
    for (int s = 0; s < 200; ++s) {
      last_ref = ref.step();
      last_q = q.step();
      if (s == 0) first_loss = last_ref;
      const std::vector<double> w_next = ref.weights();
      path += distance(w, w_next);
      w = w_next;
    }
    const double gap = distance(ref.weights(), q.weights());
    INFO("distance " << gap << ", path " << path << ", losses " << first_loss << " -> " << last_ref << " / " << last_q);
    CHECK(gap <= 0.056 * path);
    CHECK(last_ref < 0.9 * first_loss);  // it learned (random labels: not to zero)
    CHECK(std::fabs(last_q - last_ref) <= 0.056 * (first_loss - last_ref));
  }
}

TEST_CASE("int8 state takes at most 0.27x the bytes of FP32 state, BF16 half", "[quant]") {
  auto state_bytes = [](StateFormat f) {
    engine::manual_seed(1);
    auto net = models::make_model("simplecnn");
    engine::Adam opt(net->parameters(), 1e-3);
    opt.set_state_format(f);
    auto& alloc = engine::allocator_for(engine::Device::cpu());
    const int64_t before = alloc.stats().current[static_cast<int>(engine::MemKind::OptimizerState)];
    engine::LossScaler scaler;
    const Tensor x = engine::uniform({2, 32, 32, 3}, -1, 1, DType::F16);
    net->set_compute_dtype(DType::F16);
    models::train_step(*net, opt, scaler, x, Tensor::from_ints({1, 2}, {2}), DType::F16, 0.0, 0.0);
    return alloc.stats().current[static_cast<int>(engine::MemKind::OptimizerState)] - before;
  };
  const double f32 = static_cast<double>(state_bytes(StateFormat::F32));
  // Two moments of 4 bytes per parameter: simplecnn's 532,202 parameters.
  CHECK(f32 == 8.0 * 532202);
  CHECK(state_bytes(StateFormat::BF16) / f32 == 0.5);
  const double int8 = state_bytes(StateFormat::Int8) / f32;
  INFO("int8 / fp32 state bytes " << int8);
  CHECK(int8 <= 0.27);
  CHECK(int8 >= 0.25);  // 1 byte a value plus 4 bytes per 256: never below a quarter
}

TEST_CASE("checkpoints carry int8 state: save, load, and the next steps are the same bits", "[quant]") {
  Regression a(StateFormat::Int8);
  for (int s = 0; s < 5; ++s) a.step();
  engine::StateDict ck;
  a.net->save_state(ck);
  a.opt->save_state(ck);
  Regression b(StateFormat::Int8);
  b.net->load_state(ck);
  b.opt->load_state(ck);
  for (int s = 0; s < 5; ++s) {
    a.step();
    b.step();
  }
  CHECK(a.weights() == b.weights());
  // A checkpoint of another format is refused with a message naming both.
  Regression c(StateFormat::F32);
  REQUIRE_THROWS_WITH(c.opt->load_state(ck), Catch::Contains("optimizer state is int8, not fp32"));
}

// Seeing the numbers: range statistics against a direct count, anomaly mode naming the op and
// layer of an injected NaN (forward and backward), and FP32 layers inside an FP16 model.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/amp.h"
#include "engine/nn.h"
#include "engine/numerics.h"
#include "engine/random.h"
#include "engine/tape.h"
#include "models/models.h"
#include "tests/numerics_cases.h"

using numerics_cases::NanForward;
using numerics_cases::require_same;

using Catch::Contains;
using engine::DType;
using engine::Tensor;

namespace {


// y = x, whose backward returns NaN: a fault only backward can see.
class NanBackward : public engine::Module {
 public:
  Tensor forward(const Tensor& x) override {
    Tensor y = x.clone();
    if (engine::should_record({&x}))
      engine::active_tape()->record("nan_backward", {x}, y, [](const Tensor& g) {
        return std::vector<Tensor>{Tensor::full(g.shape(), NAN, g.dtype(), g.device())};
      });
    return y;
  }
  std::string describe() const override { return "NanBackward"; }
};


}  // namespace

TEST_CASE("range statistics equal a direct count, in FP16, BF16 and FP32, with and without a scale", "[numerics]") {
  const std::vector<double> values = numerics_cases::bucket_values();
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    const Tensor t = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, dt);
    for (double scale : {1.0, 1024.0, 65536.0}) {
      INFO(engine::dtype_name(dt) << " scale " << scale);
      const engine::RangeStats want = numerics_cases::direct_count(t.to_vector(), scale);
      require_same(engine::range_stats(t, scale), want);
    }
  }
  // The cases reach every bucket (else the comparison above proves little).
  const Tensor f32 = Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, DType::F32);
  const engine::RangeStats s = engine::range_stats(f32, 1024.0);
  REQUIRE(s.zeros == 3);
  REQUIRE(s.nan == 2);
  REQUIRE(s.inf == 2);  // -3e38 is finite in FP32
  REQUIRE(s.subnormal > 0);
  REQUIRE(s.flush > 0);
  REQUIRE(s.flush_unscaled > s.flush);
  REQUIRE(s.near_overflow > 0);
  REQUIRE(s.overflow > 0);
  REQUIRE(s.absmax == Approx(3e38).epsilon(1e-7));
}

TEST_CASE("a batch of range statistics is read once, in order, and matches one-by-one reads", "[numerics]") {
  engine::RangeBatch batch;
  std::vector<Tensor> ts;
  for (int i = 0; i < 70; ++i) {  // more than one buffer chunk
    ts.push_back(engine::uniform({17 + i}, -std::ldexp(1.0, -20 + i % 30), std::ldexp(1.0, -20 + i % 30), DType::F16));
    batch.add(ts.back(), i % 2 ? 512.0 : 1.0);
  }
  const auto all = batch.read();
  REQUIRE(all.size() == 70);
  for (int i = 0; i < 70; ++i) require_same(all[i], engine::range_stats(ts[i], i % 2 ? 512.0 : 1.0));
  REQUIRE(batch.size() == 0);
}

namespace {

// Linear -> (fault) -> ReLU -> Linear, under the names a model's hooks would carry.
struct Net {
  engine::Sequential seq;
  engine::NumericsHooks hooks;
  explicit Net(std::shared_ptr<engine::Module> fault) {
    engine::manual_seed(8);
    auto fc1 = std::make_shared<engine::Linear>(6, 5);
    auto relu = std::make_shared<engine::ReLU>();
    auto fc2 = std::make_shared<engine::Linear>(5, 3);
    seq.add(fc1).add(fault).add(relu).add(fc2);
    hooks.names = {{fc1.get(), "fc1"}, {fault.get(), "middle"}, {relu.get(), "relu"}, {fc2.get(), "fc2"}};
    hooks.anomaly = true;
    hooks.step = 7;
    hooks.loss_scale = 1024;
  }
  void step() {
    engine::Tape tape;
    engine::TapeScope rec(tape);
    const Tensor x = engine::uniform({4, 6}, -1, 1, DType::F32);
    const Tensor loss = engine::sum(seq(x));
    tape.backward(loss);
  }
};

}  // namespace

TEST_CASE("anomaly mode names the op and layer of a NaN in forward and in backward, and is quiet on a clean run",
          "[numerics]") {
  {
    Net clean(std::make_shared<engine::ReLU>());
    engine::NumericsScope on(clean.hooks);
    REQUIRE_NOTHROW(clean.step());
  }
  {
    Net net(std::make_shared<NanForward>());
    engine::NumericsScope on(net.hooks);
    REQUIRE_THROWS_WITH(net.step(), Contains("anomaly: step 7: scale forward in layer middle produced 20 NaN") &&
                                        Contains("f32[4,5]") && Contains("loss scale 1024"));
  }
  {
    Net net(std::make_shared<NanBackward>());
    engine::NumericsScope on(net.hooks);
    REQUIRE_THROWS_WITH(net.step(), Contains("anomaly: step 7: nan_backward backward in layer middle produced 20 NaN"));
    // With the loss scaler on, an overflow in backward is the scaler's to handle: a note.
    net.hooks.scaler_on = true;
    net.hooks.noted_this_step = false;
    REQUIRE_NOTHROW(net.step());
    REQUIRE(net.hooks.noted_this_step);
    net.hooks.strict = true;  // --detect-anomaly=strict
    net.hooks.noted_this_step = false;
    REQUIRE_THROWS_WITH(net.step(), Contains("nan_backward backward in layer middle"));
  }
  {  // Without hooks the same fault passes silently, as a normal step would.
    Net net(std::make_shared<NanForward>());
    REQUIRE_NOTHROW(net.step());
  }
}

TEST_CASE("FP32 layers: fc1 runs in FP32 inside an FP16 simplecnn, the rest as before", "[numerics]") {
  engine::manual_seed(30);
  auto plain = models::simplecnn();
  engine::manual_seed(30);
  auto mixed = models::simplecnn();
  const auto layers = models::named_layers(*mixed, "simplecnn");
  engine::Module* fc1 = nullptr;
  for (const auto& l : layers)
    if (l.name == "fc1") fc1 = l.module;
  REQUIRE(fc1 != nullptr);
  fc1->set_fp32_region();
  plain->set_compute_dtype(DType::F16);
  mixed->set_compute_dtype(DType::F16);
  plain->eval();
  mixed->eval();
  auto* fc1_linear = dynamic_cast<engine::Linear*>(fc1);
  REQUIRE(fc1_linear->weight->value.dtype() == DType::F32);
  REQUIRE(fc1_linear->weight->value.same_storage(fc1_linear->weight->master));  // the master is the FP32 copy
  for (const auto& [name, p] : mixed->named_parameters())
    if (name.rfind("7.", 0) != 0) REQUIRE(p->value.dtype() == DType::F16);

  // Every layer's output, captured through the hooks.
  auto outputs_of = [](engine::Module& net, const std::vector<models::NamedLayer>& names) {
    engine::NumericsHooks hooks;
    for (const auto& l : names) hooks.names[l.module] = l.name;
    std::map<std::string, Tensor> out;
    hooks.on_layer_output = [&](const engine::Module&, const std::string& name, const Tensor& y) { out[name] = y; };
    engine::NumericsScope on(hooks);
    engine::NoGradScope no_grad;
    engine::AutocastScope autocast(DType::F16);
    engine::manual_seed(31);
    out["logits"] = net(engine::uniform({3, 32, 32, 3}, -1, 1, DType::F16));
    return out;
  };
  const auto a = outputs_of(*plain, models::named_layers(*plain, "simplecnn"));
  const auto b = outputs_of(*mixed, layers);
  REQUIRE(b.at("fc1").dtype() == DType::F32);
  for (const char* name : {"conv1", "conv2", "6", "8", "fc2", "logits"}) REQUIRE(b.at(name).dtype() == DType::F16);
  // Before fc1 nothing changed, bit for bit.
  REQUIRE(a.at("6").to_vector() == b.at("6").to_vector());
  // fc1 itself: |y32 - y16| <= (2^-10 + 2n 2^-24) (|W||x| + |b|): the FP16 run rounds the weights
  // (2^-11 relative) and its output (2^-11 of |y| <= |W||x| + |b|) once each, and both sum
  // n = 2048 products in FP32.
  const std::vector<double> x = a.at("6").to_vector(), w = fc1_linear->weight->master.to_vector(),
                            bias = fc1_linear->bias->master.to_vector();
  const std::vector<double> y16 = a.at("fc1").to_vector(), y32 = b.at("fc1").to_vector();
  int64_t outside = 0;
  for (int r = 0; r < 3; ++r)
    for (int o = 0; o < 256; ++o) {
      double mag = std::fabs(bias[o]);
      for (int k = 0; k < 2048; ++k) mag += std::fabs(w[o * 2048 + k] * x[r * 2048 + k]);
      const double bound = (std::ldexp(1.0, -10) + 2 * 2048 * std::ldexp(1.0, -24)) * mag;
      outside += std::fabs(y32[r * 256 + o] - y16[r * 256 + o]) > bound;
    }
  REQUIRE(outside == 0);
  REQUIRE(y32 != y16);  // and it did run differently
}

// [cuda] seeing the numbers on the GPU: range statistics against the direct count (one pass
// per tensor, read once for a batch), anomaly mode on device tensors, FP32 layers on the GPU.
#include <cmath>
#include <map>

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
const engine::Device kGpu = engine::Device::cuda(0);
}  // namespace

TEST_CASE("range statistics on the GPU equal the direct count, in FP16, BF16 and FP32", "[cuda]") {
  std::vector<double> values = numerics_cases::bucket_values();
  // Long enough for many blocks, each thread several values: the block merge and atomics count.
  std::vector<double> many;
  for (int r = 0; r < 9000; ++r) many.insert(many.end(), values.begin(), values.end());
  for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
    for (const auto* v : {&values, &many}) {
      const Tensor host = Tensor::from_vector(*v, {static_cast<int64_t>(v->size())}, dt);
      const Tensor dev = host.to(kGpu);
      for (double scale : {1.0, 65536.0}) {
        INFO(engine::dtype_name(dt) << " n " << v->size() << " scale " << scale);
        require_same(engine::range_stats(dev, scale), numerics_cases::direct_count(host.to_vector(), scale));
        require_same(engine::range_stats(dev, scale), engine::range_stats(host, scale));  // and the CPU twin
      }
    }
  }
  // A batch over several tensors and buffer chunks: one read, same answers.
  engine::RangeBatch batch;
  std::vector<Tensor> ts;
  for (int i = 0; i < 70; ++i) {
    ts.push_back(engine::uniform({1 + 97 * i}, -std::ldexp(1.0, -18 + i % 25), std::ldexp(1.0, -18 + i % 25), DType::F16));
    batch.add(ts.back().to(kGpu), 256.0);
  }
  const auto all = batch.read();
  for (int i = 0; i < 70; ++i) require_same(all[i], engine::range_stats(ts[i], 256.0));
}

TEST_CASE("anomaly mode names the op and layer of a NaN in forward on the GPU; clean runs pass", "[cuda]") {
  for (bool fault : {false, true}) {
    engine::manual_seed(8);
    auto fc1 = std::make_shared<engine::Linear>(6, 5);
    std::shared_ptr<engine::Module> middle = fault ? std::shared_ptr<engine::Module>(std::make_shared<NanForward>())
                                                   : std::make_shared<engine::ReLU>();
    auto fc2 = std::make_shared<engine::Linear>(5, 3);
    engine::Sequential seq;
    seq.add(fc1).add(middle).add(fc2);
    seq.to(kGpu);
    engine::NumericsHooks hooks;
    hooks.names = {{fc1.get(), "fc1"}, {middle.get(), "middle"}, {fc2.get(), "fc2"}};
    hooks.anomaly = true;
    hooks.step = 3;
    engine::NumericsScope on(hooks);
    engine::Tape tape;
    engine::TapeScope rec(tape);
    auto run = [&] { tape.backward(engine::sum(seq(engine::uniform({4, 6}, -1, 1, DType::F32).to(kGpu)))); };
    if (fault)
      REQUIRE_THROWS_WITH(run(), Contains("step 3: scale forward in layer middle produced 20 NaN") && Contains("cuda"));
    else
      REQUIRE_NOTHROW(run());
  }
}

TEST_CASE("FP32 layers on the GPU: fc1's weight and output FP32, the rest FP16", "[cuda]") {
  engine::manual_seed(30);
  auto net = models::simplecnn();
  const auto layers = models::named_layers(*net, "simplecnn");
  engine::NumericsHooks hooks;
  for (const auto& l : layers) {
    hooks.names[l.module] = l.name;
    if (l.name == "fc1") l.module->set_fp32_region();
  }
  net->set_compute_dtype(DType::F16);
  net->to(kGpu);
  net->eval();
  std::map<std::string, DType> dtypes;
  hooks.on_layer_output = [&](const engine::Module&, const std::string& name, const Tensor& y) { dtypes[name] = y.dtype(); };
  engine::NumericsScope on(hooks);
  engine::NoGradScope no_grad;
  engine::AutocastScope autocast(DType::F16);
  const Tensor logits = (*net)(engine::uniform({2, 32, 32, 3}, -1, 1, DType::F16).to(kGpu));
  REQUIRE(dtypes.at("fc1") == DType::F32);
  REQUIRE(dtypes.at("conv2") == DType::F16);
  REQUIRE(dtypes.at("8") == DType::F16);
  REQUIRE(logits.dtype() == DType::F16);
  const std::vector<double> z = logits.to_vector();
  for (double v : z) REQUIRE(std::isfinite(v));
}

// The CPU's fused ops (conv2d_relu, linear_relu: the ReLU in the kernels' store) against the two
// ops they replace, bit for bit, forward and backward, in every dtype; and Sequential's fusion
// against the same model run module by module (as numerics hooks see it).
#include <cstring>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tape.h"

using engine::DType;
using engine::Tensor;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  return std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// y = f(inputs); backward from gy; returns y and the inputs' gradients.
template <class F>
std::vector<Tensor> run(F f, std::vector<Tensor> inputs, const Tensor& gy) {
  for (Tensor& t : inputs) {
    t = t.clone();
    t.set_requires_grad(true);
  }
  engine::Tape tape;
  Tensor y;
  {
    engine::TapeScope scope(tape);
    y = f(inputs);
  }
  tape.backward(y, gy);
  std::vector<Tensor> out = {y};
  for (Tensor& t : inputs) out.push_back(t.grad());
  return out;
}

}  // namespace

TEST_CASE("conv2d_relu and linear_relu equal relu of conv2d and linear, bit for bit, forward and backward",
          "[fusion]") {
  engine::manual_seed(5);
  // A BF16 conv of 32 channels runs on the tile kernels where the CPU has a BF16 unit (the fused
  // ReLU in their store); 3 channels and the other dtypes take the ReLU pass after the kernel.
  struct ConvCase { int64_t n, h, w, c, k, r, stride, pad; };
  for (DType dt : {DType::F32, DType::BF16, DType::F16})
    for (const ConvCase& cc : {ConvCase{2, 6, 7, 3, 8, 3, 1, 1}, ConvCase{2, 8, 8, 32, 40, 3, 1, 1},
                               ConvCase{2, 8, 8, 32, 24, 1, 2, 0}}) {
      INFO(engine::dtype_name(dt) << " conv c " << cc.c << " k " << cc.k << " r " << cc.r << " stride " << cc.stride);
      const Tensor x = engine::cast(engine::uniform({cc.n, cc.h, cc.w, cc.c}, -1, 1, DType::F32), dt);
      const Tensor w = engine::cast(engine::uniform({cc.k, cc.r, cc.r, cc.c}, -0.5, 0.5, DType::F32), dt);
      const Tensor b = engine::cast(engine::uniform({cc.k}, -0.5, 0.5, DType::F32), dt);
      const int64_t oh = (cc.h + 2 * cc.pad - cc.r) / cc.stride + 1, ow = (cc.w + 2 * cc.pad - cc.r) / cc.stride + 1;
      const Tensor gy = engine::cast(engine::uniform({cc.n, oh, ow, cc.k}, -1, 1, DType::F32), dt);
      const auto fused = run([&](const std::vector<Tensor>& v) { return engine::conv2d_relu(v[0], v[1], v[2], cc.stride, cc.pad); },
                             {x, w, b}, gy);
      const auto apart = run(
          [&](const std::vector<Tensor>& v) { return engine::relu(engine::conv2d(v[0], v[1], v[2], cc.stride, cc.pad)); },
          {x, w, b}, gy);
      for (size_t i = 0; i < fused.size(); ++i) {
        INFO("output " << i << " (0: y, then the gradients of x, w, b)");
        CHECK(same_bits(fused[i], apart[i]));
      }
    }
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    INFO(engine::dtype_name(dt) << " linear");
    const Tensor x = engine::cast(engine::uniform({5, 64}, -1, 1, DType::F32), dt);
    const Tensor w = engine::cast(engine::uniform({40, 64}, -0.3, 0.3, DType::F32), dt);
    const Tensor b = engine::cast(engine::uniform({40}, -0.3, 0.3, DType::F32), dt);
    const Tensor gy = engine::cast(engine::uniform({5, 40}, -1, 1, DType::F32), dt);
    const auto fused = run([&](const std::vector<Tensor>& v) { return engine::linear_relu(v[0], v[1], v[2]); }, {x, w, b}, gy);
    const auto apart =
        run([&](const std::vector<Tensor>& v) { return engine::relu(engine::linear(v[0], v[1], v[2])); }, {x, w, b}, gy);
    for (size_t i = 0; i < fused.size(); ++i) CHECK(same_bits(fused[i], apart[i]));
  }
}

TEST_CASE("Sequential fuses Conv2d + ReLU and Linear + ReLU without changing a bit", "[fusion][nn]") {
  // The model through Sequential (fused) and the same layers written out as separate ops (what
  // runs when numerics hooks watch each module): outputs and parameter gradients identical.
  engine::manual_seed(6);
  auto conv = std::make_shared<engine::Conv2d>(16, 32, 3, 1, 1);
  auto lin = std::make_shared<engine::Linear>(32 * 6 * 6, 20);
  auto net = std::make_shared<engine::Sequential>();
  net->add(conv).add(std::make_shared<engine::ReLU>()).add(std::make_shared<engine::Flatten>()).add(lin).add(
      std::make_shared<engine::ReLU>());
  net->set_compute_dtype(DType::BF16);
  const Tensor x = engine::cast(engine::uniform({3, 6, 6, 16}, -1, 1, DType::F32), DType::BF16);
  const Tensor gy = engine::cast(engine::uniform({3, 20}, -1, 1, DType::F32), DType::BF16);
  auto grads = [&](bool fused) {
    net->zero_grad();
    engine::Tape tape;
    Tensor y;
    {
      engine::TapeScope scope(tape);
      if (fused) {
        y = (*net)(x);
      } else {
        y = engine::relu(engine::conv2d(x, conv->weight->value, conv->bias->value, 1, 1));
        y = engine::reshape(y, {3, 32 * 6 * 6});
        y = engine::relu(engine::linear(y, lin->weight->value, lin->bias->value));
      }
    }
    // Fused, the tape holds conv2d+relu, the flatten and linear+relu; apart, five entries.
    CHECK(tape.size() == (fused ? 3u : 5u));
    tape.backward(y, gy);
    std::vector<Tensor> out = {y};
    for (auto& p : net->parameters()) out.push_back(p->value.grad().clone());
    return out;
  };
  const auto a = grads(true), b = grads(false);
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("output " << i);
    CHECK(same_bits(a[i], b[i]));
  }
}

namespace {
// A module of our own that declares a fused form: Sequential must take it by the declaration.
struct DeclaresFusion : engine::Module {
  int fused_calls = 0;
  Tensor forward(const Tensor& x) override { return engine::scale(x, 2.0); }
  bool fuses_relu() const override { return true; }
  Tensor forward_relu(const Tensor& x) override {
    ++fused_calls;
    return engine::relu(engine::scale(x, 2.0));
  }
  std::string describe() const override { return "DeclaresFusion"; }
};
}  // namespace

TEST_CASE("Sequential fuses by what modules declare, not by their types", "[fusion][nn]") {
  const Tensor x = engine::uniform({4, 8}, -1, 1, DType::F32);
  auto own = std::make_shared<DeclaresFusion>();
  engine::Sequential net;
  net.add(own).add(std::make_shared<engine::ReLU>());
  const Tensor y = net(x);
  CHECK(own->fused_calls == 1);
  CHECK(same_bits(y, engine::relu(engine::scale(x, 2.0))));
  // Followed by something that is not a ReLU (GELU), it runs on its own.
  engine::Sequential apart;
  apart.add(own).add(std::make_shared<engine::GELU>());
  apart(x);
  CHECK(own->fused_calls == 1);
  // A module without a fused form refuses to be asked for one.
  engine::GELU gelu;
  CHECK_FALSE(gelu.fuses_relu());
  CHECK_THROWS_WITH(gelu.forward_relu(x), Catch::Contains("no fused form"));
}

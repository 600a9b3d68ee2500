// The tape, the layers and the optimizers together: a tiny MLP and a tiny CNN learn small
// synthetic problems to (near) 100% training accuracy with SGD and with Adam, in FP32 and
// with FP16 compute copies over FP32 masters.
#include "catch2/catch.hpp"
#include "engine/nn.h"
#include "engine/optim.h"
#include "engine/random.h"
#include "tests/learn_util.h"

using engine::DType;
using engine::Tensor;
using testing::Problem;
using testing::blobs;
using testing::rings;
using testing::train;

namespace {

std::shared_ptr<engine::Sequential> mlp() {
  auto net = std::make_shared<engine::Sequential>();
  net->add(std::make_shared<engine::Linear>(2, 32)).add(std::make_shared<engine::ReLU>())
      .add(std::make_shared<engine::Linear>(32, 32)).add(std::make_shared<engine::GELU>())
      .add(std::make_shared<engine::Linear>(32, 4));
  return net;
}

}  // namespace

TEST_CASE("a tiny MLP learns interleaved rings with SGD+momentum and with Adam", "[learn]") {
  engine::manual_seed(21);
  const Problem data = rings(256);
  {
    auto net = mlp();
    engine::SGD opt(net->parameters(), 0.1, 0.9);
    CHECK(train(*net, opt, data, DType::F32, 300) >= 0.99);
  }
  {
    auto net = mlp();
    engine::Adam opt(net->parameters(), 0.01);
    CHECK(train(*net, opt, data, DType::F32, 300) >= 0.99);
  }
}

TEST_CASE("a tiny CNN learns quadrant blobs with SGD (Nesterov) and with AdamW", "[learn]") {
  engine::manual_seed(22);
  const Problem data = blobs(128);
  {
    auto net = testing::tiny_cnn();
    engine::SGD opt(net->parameters(), 0.05, 0.9, 1e-4, true);
    CHECK(train(*net, opt, data, DType::F32, 80) >= 0.99);
  }
  {
    auto net = testing::tiny_cnn();
    engine::Adam opt(net->parameters(), 0.01, 0.9, 0.999, 1e-8, 1e-2, true);
    CHECK(train(*net, opt, data, DType::F32, 80) >= 0.99);
  }
}

TEST_CASE("the tiny CNN also learns with FP16 compute copies over FP32 masters", "[learn][fp16]") {
  engine::manual_seed(23);
  const Problem data = blobs(128);
  for (DType compute : {DType::F16, DType::BF16}) {
    INFO("compute dtype " << engine::dtype_name(compute));
    auto net = testing::tiny_cnn();
    net->set_compute_dtype(compute);
    engine::Adam opt(net->parameters(), 0.01);
    CHECK(train(*net, opt, data, compute, 80) >= 0.99);
  }
}

// Bad input reaches the user as one engine::Error naming the op and the shapes or dtypes,
// never as a crash or a silently wrong result.
#include "catch2/catch.hpp"
#include "engine/device.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/optim.h"

using Catch::Contains;
using engine::DType;
using engine::Tensor;

TEST_CASE("mismatched shapes raise clear errors", "[errors]") {
  Tensor x = Tensor::zeros({2, 8, 8, 3}, DType::F32);
  Tensor w = Tensor::zeros({4, 3, 3, 5}, DType::F32);
  CHECK_THROWS_WITH(engine::conv2d(x, w, Tensor(), 1, 1),
                    Contains("conv2d") && Contains("[2,8,8,3]") && Contains("[4,3,3,5]"));
  CHECK_THROWS_WITH(engine::conv2d(x, Tensor::zeros({4, 9, 9, 3}, DType::F32), Tensor(), 1, 0),
                    Contains("larger than padded input"));
  CHECK_THROWS_WITH(engine::conv2d(x, Tensor::zeros({4, 3, 3, 3}, DType::F32), Tensor::zeros({5}, DType::F32)),
                    Contains("bias"));
  CHECK_THROWS_WITH(engine::linear(Tensor::zeros({2, 10}, DType::F32), Tensor::zeros({3, 11}, DType::F32), Tensor()),
                    Contains("linear") && Contains("[2,10]") && Contains("[3,11]"));
  CHECK_THROWS_WITH(engine::add(Tensor::zeros({2, 3}, DType::F32), Tensor::zeros({3, 2}, DType::F32)),
                    Contains("add: shape mismatch"));
  CHECK_THROWS_WITH(engine::max_pool2d(Tensor::zeros({2, 3}, DType::F32), 2, 2), Contains("max_pool2d"));
  CHECK_THROWS_WITH(engine::max_pool2d(x, 2, 2, 2), Contains("padding must be at most half the kernel"));
  CHECK_THROWS_WITH(engine::reshape(x, {5, 5}), Contains("reshape") && Contains("[5,5]"));
  CHECK_THROWS_WITH(engine::cross_entropy(Tensor::zeros({4, 10}, DType::F32), Tensor::from_ints({1, 2, 3}, {3})),
                    Contains("labels must be i32[4]"));
  Tensor rm = Tensor::zeros({3}, DType::F32), rv = Tensor::full({3}, 1.0, DType::F32);
  CHECK_THROWS_WITH(engine::batch_norm(x, Tensor::zeros({4}, DType::F32), Tensor::zeros({3}, DType::F32), rm, rv, true),
                    Contains("batch_norm") && Contains("f32[3]"));
}

TEST_CASE("wrong dtypes raise clear errors", "[errors]") {
  Tensor x = Tensor::zeros({1, 4, 4, 3}, DType::F32);
  CHECK_THROWS_WITH(engine::conv2d(x, Tensor::zeros({2, 3, 3, 3}, DType::F16), Tensor()),
                    Contains("conv2d: dtype mismatch") && Contains("f16"));
  CHECK_THROWS_WITH(engine::relu(Tensor::zeros({3}, DType::I32)), Contains("relu") && Contains("floating"));
  CHECK_THROWS_WITH(engine::cross_entropy(Tensor::zeros({2, 3}, DType::F32), Tensor::zeros({2}, DType::F32)),
                    Contains("labels must be i32"));
  Tensor rm = Tensor::zeros({3}, DType::F16), rv = Tensor::full({3}, 1.0, DType::F32);
  CHECK_THROWS_WITH(engine::batch_norm(x, Tensor::zeros({3}, DType::F32), Tensor::zeros({3}, DType::F32), rm, rv, true),
                    Contains("must be f32[3]"));
  CHECK_THROWS_WITH(engine::cast(x, DType::U8), Contains("cast"));
  CHECK_THROWS_WITH(Tensor::zeros({2}, DType::I32).set_requires_grad(true), Contains("non-floating"));
}

TEST_CASE("empty and undefined tensors raise clear errors", "[errors]") {
  CHECK_THROWS_WITH(engine::relu(Tensor::zeros({0, 3}, DType::F32)), Contains("relu") && Contains("empty"));
  CHECK_THROWS_WITH(engine::conv2d(Tensor::zeros({0, 4, 4, 3}, DType::F32), Tensor::zeros({2, 3, 3, 3}, DType::F32),
                                   Tensor()),
                    Contains("conv2d") && Contains("empty"));
  CHECK_THROWS_WITH(engine::linear(Tensor(), Tensor::zeros({2, 2}, DType::F32), Tensor()), Contains("undefined"));
  Tensor rm = Tensor::zeros({3}, DType::F32), rv = Tensor::full({3}, 1.0, DType::F32);
  CHECK_THROWS_WITH(engine::batch_norm(Tensor::zeros({1, 3}, DType::F32), Tensor::zeros({3}, DType::F32),
                                       Tensor::zeros({3}, DType::F32), rm, rv, true),
                    Contains("more than one value per channel"));
}

TEST_CASE("bad layer and optimizer settings raise clear errors", "[errors]") {
  CHECK_THROWS_WITH(engine::Dropout(1.0), Contains("Dropout"));
  CHECK_THROWS_WITH(engine::dropout(Tensor::zeros({3}, DType::F32), -0.1, 0, 0), Contains("outside [0, 1)"));
  CHECK_THROWS_WITH(engine::Conv2d(0, 3, 3), Contains("Conv2d"));
  engine::Linear lin(3, 2);
  CHECK_THROWS_WITH(engine::SGD(lin.parameters(), -1.0), Contains("learning rate"));
  CHECK_THROWS_WITH(engine::SGD(lin.parameters(), 0.1, 0.0, 0.0, true), Contains("Nesterov"));
  CHECK_THROWS_WITH(engine::Adam(lin.parameters(), 1e-3, 1.0), Contains("betas"));
  CHECK_THROWS_WITH(engine::parse_device("gpu"), Contains("bad device"));
}

// The CPU kernel profile (engine/profile.h): each op's kernels timed under their own names,
// once per call, only while profiling is on.
#include <map>
#include <string>

#include "catch2/catch.hpp"
#include "engine/ops.h"
#include "engine/profile.h"
#include "engine/random.h"
#include "engine/tape.h"

using engine::DType;
using engine::Tensor;

namespace {
void conv_forward_backward() {
  Tensor x = engine::uniform({2, 5, 5, 3}, -1, 1, DType::F32);
  Tensor w = engine::uniform({4, 3, 3, 3}, -1, 1, DType::F32);
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  engine::Tape tape;
  Tensor y;
  {
    engine::TapeScope scope(tape);
    y = engine::relu(engine::conv2d(x, w, Tensor(), 1, 1));
  }
  tape.backward(y, Tensor::full(y.shape(), 1.0, DType::F32));
}
}  // namespace

TEST_CASE("the kernel profile counts each CPU kernel under its name, only while on", "[profile]") {
  engine::take_kernel_profile();  // start clean
  conv_forward_backward();
  CHECK(engine::take_kernel_profile().empty());  // off by default: nothing recorded

  engine::set_kernel_profiling(true);
  conv_forward_backward();
  engine::set_kernel_profiling(false);
  std::map<std::string, engine::KernelTime> got;
  for (const engine::KernelTime& k : engine::take_kernel_profile()) got[k.name] = k;
  for (const char* name : {"conv2d", "conv2d backward data", "conv2d backward filter", "relu", "relu backward"}) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    CHECK(got[name].calls == 1);
    CHECK(got[name].seconds >= 0);
  }
  CHECK(engine::take_kernel_profile().empty());  // taking the profile resets it
}

// [cuda] EfficientNet's ops on the GPU against the CPU in FP32, FP16 and BF16: SiLU, sigmoid,
// the squeeze-and-excitation channel gate, depthwise and grouped convolution (cuDNN's group
// count), forward and backward through the engine's ops.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tape.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/conv.h"

using engine::DType;
using engine::Tensor;

namespace {
const engine::Device kGpu = engine::Device::cuda(0);

double unit(DType t) {
  return t == DType::F16 ? std::ldexp(1.0, -11) : t == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
}

// Runs f on the inputs (CPU copies and GPU copies), back-propagates the same gout, and returns
// the output and every input gradient as doubles.
std::vector<std::vector<double>> run(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                     const std::vector<Tensor>& inputs, engine::Device d, uint64_t seed) {
  std::vector<Tensor> in;
  for (const Tensor& t : inputs) {
    Tensor c = d.is_cuda() ? t.to(d) : t.clone();
    c.set_requires_grad(true);
    in.push_back(c);
  }
  engine::Tape tape;
  Tensor y;
  {
    engine::TapeScope rec(tape);
    y = f(in);
  }
  engine::manual_seed(seed);
  Tensor gout = engine::uniform(y.shape(), -1, 1, y.dtype());
  if (d.is_cuda()) gout = gout.to(d);
  tape.backward(y, gout);
  std::vector<std::vector<double>> out{y.to_vector()};
  for (const Tensor& t : in) out.push_back(t.grad().to_vector());
  return out;
}

// |gpu - cpu| <= 2 u_T |cpu| (each side rounds its FP32 result once to T, and the FP32 results
// may straddle a rounding boundary) + terms * 2^-22 * scale (two FP32 sums of `terms` products
// in different orders, bounded by `scale`, the largest possible sum of magnitudes).
void compare(const std::vector<std::vector<double>>& gpu, const std::vector<std::vector<double>>& cpu, DType dt,
             double terms, double scale, const char* what) {
  const char* names[] = {"out", "grad 0", "grad 1", "grad 2"};
  for (size_t k = 0; k < cpu.size(); ++k) {
    INFO(what << " " << engine::dtype_name(dt) << " " << names[k]);
    REQUIRE(gpu[k].size() == cpu[k].size());
    size_t bad = 0;
    for (size_t i = 0; i < cpu[k].size(); ++i)
      bad += !(std::fabs(gpu[k][i] - cpu[k][i]) <=
               2 * unit(dt) * std::fabs(cpu[k][i]) + terms * std::ldexp(1.0, -22) * scale);
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("SiLU, sigmoid and the channel gate on the GPU match the CPU in every dtype", "[cuda]") {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    engine::manual_seed(31);
    const Tensor x = engine::uniform({4, 5, 6, 40}, -8, 8, dt), g = engine::uniform({4, 40}, -1, 1, dt);
    for (int op = 0; op < 2; ++op) {
      auto f = [op](const std::vector<Tensor>& v) { return op == 0 ? engine::silu(v[0]) : engine::sigmoid(v[0]); };
      // expf on the GPU and std::exp on the CPU may differ by an ulp of FP32: 2^-22 of |x| <= 8.
      compare(run(f, {x}, kGpu, 5), run(f, {x}, engine::Device::cpu(), 5), dt, 1, 8, op == 0 ? "silu" : "sigmoid");
    }
    auto gate = [](const std::vector<Tensor>& v) { return engine::channel_gate(v[0], v[1]); };
    // The gate's gradient sums 30 products of magnitude <= 8 in the same order on both sides.
    compare(run(gate, {x, g}, kGpu, 6), run(gate, {x, g}, engine::Device::cpu(), 6), dt, 30, 8, "channel_gate");
  }
}

namespace {
// Depthwise and grouped cases in every dtype, GPU against CPU, forward and both gradients.
void check_grouped_convs() {
  struct Case { int64_t c, k, r, stride, groups; };
  for (const Case& cs : {Case{32, 32, 3, 1, 32}, Case{24, 24, 5, 2, 24}, Case{16, 32, 3, 1, 4}}) {
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      engine::manual_seed(41);
      const Tensor x = engine::uniform({3, 9, 9, cs.c}, -1, 1, dt);
      const Tensor w = engine::uniform({cs.k, cs.r, cs.r, cs.c / cs.groups}, -1, 1, dt);
      const Tensor b = engine::uniform({cs.k}, -1, 1, dt);
      auto f = [&](const std::vector<Tensor>& v) { return engine::conv2d(v[0], v[1], v[2], cs.stride, cs.r / 2, cs.groups); };
      // Sums: r*r*C/groups products per output, 3*9*9 positions per weight gradient, all of
      // magnitude <= 1 (the output gradient too).
      const double terms = 3.0 * 81, scale = 3.0 * 81;
      INFO("c " << cs.c << " k " << cs.k << " r " << cs.r << " groups " << cs.groups);
      compare(run(f, {x, w, b}, kGpu, 7), run(f, {x, w, b}, engine::Device::cpu(), 7), dt, terms, scale, "conv2d");
    }
  }
}
}  // namespace

TEST_CASE("depthwise and grouped convolution on the GPU (cuDNN groups) match the CPU", "[cuda]") {
  check_grouped_convs();
}

TEST_CASE("depthwise and grouped convolution through the relaxed route give the same results", "[cuda]") {
  // As if no algorithm ran under the test binary's rules (deterministic, strict FP32): the
  // route that loosens them (first determinism, then strict FP32) must still be right.
  struct RouteGuard {
    ~RouteGuard() {
      kernels::cuda::set_conv_first_route_for_test(kernels::cuda::ConvRoute::Search);
      kernels::cuda::clear_conv_algo_cache();
    }
  } guard;
  REQUIRE(kernels::cuda::deterministic());  // tests/cuda/main.cpp sets it: there is a rule to relax
  kernels::cuda::clear_conv_algo_cache();
  kernels::cuda::set_conv_first_route_for_test(kernels::cuda::ConvRoute::Relaxed);
  check_grouped_convs();
  const std::string report = kernels::cuda::conv_algo_report();
  INFO(report);
  CHECK(report.find("relaxed rules: nothing runs it under strict FP32, deterministic") != std::string::npos);
  CHECK(report.find("relaxed rules: nothing runs it under deterministic") != std::string::npos);
}

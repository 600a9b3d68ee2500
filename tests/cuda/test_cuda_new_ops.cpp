// [cuda] EfficientNet's ops on the GPU against the CPU in FP32, FP16 and BF16: SiLU, sigmoid,
// the squeeze-and-excitation channel gate, depthwise and grouped convolution (cuDNN's group
// count), forward and backward through the engine's ops; the convolution's fallback routes
// (relaxed rules, NCHW copies, one convolution per group) forced one at a time; and, from
// the algorithm report, that strict FP32 ran FMA math (not TF32) for every shape compared.
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
namespace kg = kernels::cuda;

struct ConvCase { int64_t c, k, r, stride, groups; };
// Depthwise 3x3 and 5x5 stride 2 (EfficientNet's), 4 groups of 4 inputs and 8 outputs.
const std::vector<ConvCase> kGroupedCases = {{32, 32, 3, 1, 32}, {24, 24, 5, 2, 24}, {16, 32, 3, 1, 4}};
// Ungrouped, odd channel counts (3 like RGB; 13 at stride 2).
const std::vector<ConvCase> kUngroupedCases = {{3, 5, 3, 1, 1}, {13, 7, 3, 2, 1}};
const std::vector<DType> kAllTypes = {DType::F32, DType::F16, DType::BF16};

// The shape conv.cu sees for a case (engine::conv2d's), as the report prints it.
kernels::ConvShape shape_of(const ConvCase& cs) {
  return kernels::ConvShape{3, 9, 9, cs.c, cs.k, cs.r, cs.r, cs.stride, cs.r / 2, cs.groups};
}
const char* report_dtype(DType dt) { return dt == DType::F32 ? "f32" : dt == DType::F16 ? "f16" : "bf16"; }
const char* const kDirections[] = {"fwd", "bwd-data", "bwd-filter"};

// Strict FP32 (TF32 is off in these tests): every report line of the shape's FP32 choices, in
// each direction, must show FMA math; one that ran TF32 (or default math, which permits it)
// fails with its line.
void expect_fma_ran(const kernels::ConvShape& d) {
  const std::vector<std::string> lines = kg::conv_report_lines(d);
  for (const char* dir : kDirections) {
    const std::string prefix = std::string("conv ") + dir + " f32 ";
    int seen = 0;
    for (const std::string& line : lines) {
      if (line.compare(0, prefix.size(), prefix) != 0) continue;
      ++seen;
      INFO("strict FP32 ran: " << line);
      CHECK(line.find("(fma)") != std::string::npos);
    }
    INFO(dir << ": no report line for the shape; the report:\n" << kg::conv_algo_report());
    CHECK(seen > 0);
  }
}

// The report says `route` (its words in the line, e.g. "nchw, NCHW copies") ran the shape in
// every direction for dtype dt.
void expect_route(const kernels::ConvShape& d, DType dt, const std::string& route) {
  const std::vector<std::string> lines = kg::conv_report_lines(d);
  for (const char* dir : kDirections) {
    const std::string prefix = std::string("conv ") + dir + " " + report_dtype(dt) + " ";
    bool found = false;
    for (const std::string& line : lines)
      found = found || (line.compare(0, prefix.size(), prefix) == 0 && line.find(route) != std::string::npos);
    INFO(dir << " " << report_dtype(dt) << ": expected route \"" << route << "\"; the report:\n"
             << kg::conv_algo_report());
    CHECK(found);
  }
}

// The cases in the given dtypes, GPU against CPU, forward and both gradients; FP32 must have
// run FMA math. Each caller passes its own seed: the caching allocator may hand an output the
// block that held the same result in an earlier test, which would hide a route that leaves
// part of its output unwritten.
void check_convs(const std::vector<ConvCase>& cases, const std::vector<DType>& dtypes, uint64_t seed) {
  for (const ConvCase& cs : cases) {
    for (DType dt : dtypes) {
      engine::manual_seed(seed);
      const Tensor x = engine::uniform({3, 9, 9, cs.c}, -1, 1, dt);
      const Tensor w = engine::uniform({cs.k, cs.r, cs.r, cs.c / cs.groups}, -1, 1, dt);
      const Tensor b = engine::uniform({cs.k}, -1, 1, dt);
      auto f = [&](const std::vector<Tensor>& v) { return engine::conv2d(v[0], v[1], v[2], cs.stride, cs.r / 2, cs.groups); };
      // Sums: r*r*C/groups products per output (at most 117 here), K/groups*r*r per input
      // gradient, 3*9*9 positions per weight gradient, all of magnitude <= 1 (the output
      // gradient too).
      const double terms = 3.0 * 81, scale = 3.0 * 81;
      INFO("c " << cs.c << " k " << cs.k << " r " << cs.r << " stride " << cs.stride << " groups " << cs.groups);
      compare(run(f, {x, w, b}, kGpu, 7), run(f, {x, w, b}, engine::Device::cpu(), 7), dt, terms, scale, "conv2d");
      if (dt == DType::F32) expect_fma_ran(shape_of(cs));
    }
  }
}
void check_grouped_convs(uint64_t seed) { check_convs(kGroupedCases, kAllTypes, seed); }

// Starts the choice at `route` (cache cleared), and restores the normal order after, even when
// a REQUIRE aborts the test.
struct RouteGuard {
  explicit RouteGuard(kg::ConvRoute route) {
    kg::clear_conv_algo_cache();
    kg::set_conv_first_route_for_test(route);
  }
  ~RouteGuard() {
    kg::set_conv_first_route_for_test(kg::ConvRoute::Search);
    kg::clear_conv_algo_cache();
  }
};
}  // namespace

TEST_CASE("depthwise and grouped convolution on the GPU (cuDNN groups) match the CPU", "[cuda]") {
  check_grouped_convs(41);
}

TEST_CASE("strict FP32 convolutions run FMA math, not TF32", "[cuda]") {
  // The usual order of routes (NHWC, padded, NCHW copies, per group) before any rule is
  // relaxed: each shape compared at FP32's bounds must say FMA in the report.
  REQUIRE(!kg::allow_tf32());
  kg::clear_conv_algo_cache();
  check_convs(kUngroupedCases, {DType::F32}, 42);
  check_convs(kGroupedCases, {DType::F32}, 43);
  UNSCOPED_INFO(kg::conv_algo_report());
}

TEST_CASE("depthwise and grouped convolution through the relaxed route give the same results", "[cuda]") {
  // As if no algorithm ran under the test binary's rules (deterministic, strict FP32): the
  // route that loosens them (first determinism, then strict FP32) must still be right.
  REQUIRE(kg::deterministic());  // tests/cuda/main.cpp sets it: there is a rule to relax
  RouteGuard guard(kg::ConvRoute::Relaxed);
  check_grouped_convs(44);
  const std::string report = kg::conv_algo_report();
  INFO(report);
  CHECK(report.find("relaxed rules: nothing runs it under strict FP32, deterministic") != std::string::npos);
  CHECK(report.find("relaxed rules: nothing runs it under deterministic") != std::string::npos);
}

TEST_CASE("convolutions on NCHW copies (the route before strict FP32 is given up) match the CPU", "[cuda]") {
  // As if nothing ran in NHWC: transposed copies, NCHW descriptors, the output transposed back.
  RouteGuard guard(kg::ConvRoute::Nchw);
  check_convs(kUngroupedCases, kAllTypes, 45);
  check_grouped_convs(46);
  // FP32 must have run there, with FMA math (checked above). FP16 and BF16 may find no NCHW
  // algorithm for a shape and go on to the next route, still compared above: said, not failed.
  for (const std::vector<ConvCase>* cases : {&kUngroupedCases, &kGroupedCases})
    for (const ConvCase& cs : *cases) {
      INFO("c " << cs.c << " k " << cs.k << " r " << cs.r << " groups " << cs.groups);
      expect_route(shape_of(cs), DType::F32, "nchw, NCHW copies");
    }
  UNSCOPED_INFO(kg::conv_algo_report());
}

TEST_CASE("grouped and depthwise convolution one group at a time (the last resort) match the CPU", "[cuda]") {
  // As if nothing ran the grouped shape: per group, packed copies of its channels, one
  // ungrouped convolution, the result copied into the group's part of the output.
  RouteGuard guard(kg::ConvRoute::PerGroup);
  check_grouped_convs(47);
  for (const ConvCase& cs : kGroupedCases)
    for (DType dt : kAllTypes) {
      INFO("c " << cs.c << " k " << cs.k << " r " << cs.r << " groups " << cs.groups);
      expect_route(shape_of(cs), dt, "one convolution per group");
    }
  // The groups share one sub-shape's choice: per sub-shape, direction and dtype one report
  // line, or two when it ran on NCHW copies (the copies' line and their inner choice's, both
  // under the sub-shape's dims), never one per group (32 here).
  const kernels::ConvShape sub{3, 9, 9, 1, 1, 3, 3, 1, 1};  // the 3x3 depthwise case's group
  for (const char* dir : kDirections) {
    const std::string prefix = std::string("conv ") + dir + " f32 ";
    int lines = 0;
    for (const std::string& line : kg::conv_report_lines(sub)) lines += line.compare(0, prefix.size(), prefix) == 0;
    INFO(dir << "; the report:\n" << kg::conv_algo_report());
    CHECK(lines >= 1);
    CHECK(lines <= 2);
  }
}

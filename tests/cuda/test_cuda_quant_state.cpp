// [cuda] compact optimizer state (--optimizer-state bf16 | int8) in the fused multi-tensor step
// against the CPU's block step: the same codes (shared kernels/quant_math.h), the same updates.
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/nn.h"
#include "engine/optim.h"
#include "engine/random.h"
#include "kernels/quant_math.h"
#include "tests/cuda/cuda_test_util.h"

using engine::DType;
using engine::StateFormat;
using engine::Tensor;
using namespace cuda_test;

namespace {
const engine::Device kGpu = engine::Device::cuda(0);

// The dequantised first (which = 1) or second (which = 2) state of every parameter.
std::vector<double> state_values(const engine::Optimizer& opt, StateFormat f, int which) {
  std::vector<double> out;
  auto add = [&](const Tensor& s, const Tensor& absmax, bool is_signed) {
    if (f == StateFormat::BF16) {
      const auto v = s.to_vector();
      out.insert(out.end(), v.begin(), v.end());
      return;
    }
    const Tensor codes = s.to_cpu(), scales = absmax.to_cpu();
    for (int64_t i = 0; i < codes.numel(); ++i) {
      const float a = scales.data<float>()[i / kernels::kQuantBlock];
      const uint8_t c = codes.data<uint8_t>()[i];
      out.push_back(is_signed ? kernels::decode_signed(c, a) : kernels::decode_unsigned(c, a));
    }
  };
  if (const auto* adam = dynamic_cast<const engine::Adam*>(&opt)) {
    for (size_t i = 0; i < adam->exp_avg.size(); ++i) {
      if (which == 1) add(adam->exp_avg[i], f == StateFormat::Int8 ? adam->exp_avg_absmax[i] : Tensor(), true);
      else add(adam->exp_avg_sq[i], f == StateFormat::Int8 ? adam->exp_avg_sq_absmax[i] : Tensor(), false);
    }
  } else if (const auto* sgd = dynamic_cast<const engine::SGD*>(&opt)) {
    for (size_t i = 0; i < sgd->momentum_buffers.size(); ++i)
      add(sgd->momentum_buffers[i], f == StateFormat::Int8 ? sgd->momentum_absmax[i] : Tensor(), true);
  }
  return out;
}

std::vector<double> masters(const engine::Module& m) {
  std::vector<double> out;
  for (const auto& p : m.parameters()) {
    const auto v = p->master.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

}  // namespace

// Bounds: both sides run adam_update / sgd_update in FP32 on the same inputs; nvcc's FMA
// contraction moves results by a few units of 2^-24 per step (as in test_cuda_optim_alloc.cpp:
// 8 u per step of |w| + 10 lr on the masters). A state value that lands that close to a code
// boundary may round to the neighbouring code: within one code step, 2^(1/8) - 1 = 9.1% of the
// value (signed) or 2^(1/16) - 1 = 4.4% (unsigned), plus the FP32 part; BF16 state within one
// BF16 step (2^-7 of the value: a midpoint case rounds a whole step apart).
TEST_CASE("compact optimizer state on the GPU matches the CPU's block step", "[cuda]") {
  for (StateFormat f : {StateFormat::Int8, StateFormat::BF16}) {
    for (bool adam : {true, false}) {
      INFO(engine::state_format_name(f) << (adam ? " Adam" : " SGD"));
      engine::manual_seed(4);
      auto cpu = std::make_shared<engine::Linear>(700, 601);  // 421,301 values: many chunks and blocks, a short last one
      engine::manual_seed(4);
      auto gpu = std::make_shared<engine::Linear>(700, 601);
      gpu->set_compute_dtype(DType::F16);
      cpu->set_compute_dtype(DType::F16);
      gpu->to(kGpu);
      std::unique_ptr<engine::Optimizer> oc, og;
      if (adam) {
        oc = std::make_unique<engine::Adam>(cpu->parameters(), 1e-3);
        og = std::make_unique<engine::Adam>(gpu->parameters(), 1e-3);
      } else {
        oc = std::make_unique<engine::SGD>(cpu->parameters(), 0.05, 0.9);
        og = std::make_unique<engine::SGD>(gpu->parameters(), 0.05, 0.9);
      }
      oc->set_state_format(f);
      og->set_state_format(f);
      const int steps = 3;
      for (int t = 0; t < steps; ++t) {
        engine::manual_seed(50 + t);
        for (size_t k = 0; k < cpu->parameters().size(); ++k) {
          // Gradients spanning many octaves, so blocks have small and large values.
          const auto& pc = cpu->parameters()[k];
          Tensor g = engine::normal(pc->value.shape(), 0.0, 100.0, DType::F16);
          pc->value.set_grad(g);
          gpu->parameters()[k]->value.set_grad(g.to(kGpu));
        }
        CHECK(oc->step(1.0 / 128) == engine::StepResult::Applied);
        og->step(1.0 / 128);
      }
      // A state value that flipped to the neighbouring code changes its element's later updates
      // by up to that code step (9%) of an update (at most ~10 lr): allowed for a few elements
      // (1 in 1000), the rest within the FP32 bound.
      const double u = std::ldexp(1.0, -24), lr = adam ? 1e-3 : 0.05;
      const auto wc = masters(*cpu), wg = masters(*gpu);
      size_t beyond_fp32 = 0, beyond_flip = 0;
      for (size_t i = 0; i < wc.size(); ++i) {
        const double d = std::fabs(wg[i] - wc[i]), fp32 = 8 * steps * u * (std::fabs(wc[i]) + 10 * lr);
        beyond_fp32 += d > fp32;
        beyond_flip += d > fp32 + 0.1 * 10 * lr * steps;
      }
      INFO(beyond_fp32 << " of " << wc.size() << " masters beyond the FP32 bound");
      CHECK(beyond_flip == 0);
      CHECK(beyond_fp32 <= wc.size() / 1000);
      for (int which : adam ? std::vector<int>{1, 2} : std::vector<int>{1}) {
        INFO("state " << which);
        const auto sc = state_values(*oc, f, which), sg = state_values(*og, f, which);
        REQUIRE(sc.size() == sg.size());
        const double code_step = f == StateFormat::BF16 ? std::ldexp(1.0, -7)
                                 : which == 1          ? std::pow(2.0, 1.0 / 8) - 1
                                                       : std::pow(2.0, 1.0 / 16) - 1;
        size_t off = 0;
        double largest = 0;
        for (double v : sc) largest = std::max(largest, std::fabs(v));
        for (size_t i = 0; i < sc.size(); ++i)
          off += std::fabs(sg[i] - sc[i]) > code_step * std::fabs(sc[i]) + 8 * steps * u * largest;
        CHECK(off == 0);
      }
    }
  }
}

// [cuda] the fused multi-tensor optimizer against its CPU twin (kernels/cpu/optim.h), the
// device-side skip on overflow, and the caching allocator (block reuse, statistics, OOM).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "cuda_test_util.h"
#include "engine/allocator.h"
#include "engine/device.h"
#include "engine/error.h"
#include "kernels/cpu/optim.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/optim.h"

namespace kc = kernels::cpu;
namespace kg = kernels::cuda;
using kg::ElemType;
using namespace cuda_test;

namespace {

size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::F32: return 4;
    case ElemType::F64: return 8;
    case ElemType::F16:
    case ElemType::BF16: return 2;
    case ElemType::None: return 0;
  }
  return 0;
}

template <class F> void with_type(ElemType t, F f) {
  switch (t) {
    case ElemType::F32: f(float{}); break;
    case ElemType::F64: f(double{}); break;
    case ElemType::F16: f(half{}); break;
    case ElemType::BF16: f(bfloat16{}); break;
    case ElemType::None: FAIL("no type"); break;
  }
}

// One parameter, held twice: host arrays stepped by the CPU twin, device arrays by the GPU.
struct TestParam {
  ElemType gt, ct;
  int64_t n;
  std::vector<float> master, s1, s2;
  std::vector<unsigned char> grad, copy;  // raw bytes in gt / ct
  std::unique_ptr<DeviceBuffer<float>> d_master, d_s1, d_s2;
  std::unique_ptr<DeviceBuffer<unsigned char>> d_grad, d_copy;

  TestParam(ElemType g, ElemType c, int64_t count, uint64_t seed, bool two_states) : gt(g), ct(c), n(count) {
    master = random_vec<float>(static_cast<size_t>(n), seed, -1, 1);
    s1.assign(static_cast<size_t>(n), 0.f);
    s2.assign(two_states ? static_cast<size_t>(n) : 0, 0.f);
    grad.resize(static_cast<size_t>(n) * elem_size(gt));
    d_master = std::make_unique<DeviceBuffer<float>>(master);
    d_s1 = std::make_unique<DeviceBuffer<float>>(s1);
    if (two_states) d_s2 = std::make_unique<DeviceBuffer<float>>(s2);
    d_grad = std::make_unique<DeviceBuffer<unsigned char>>(grad.size());
    if (ct != ElemType::None) {
      copy.resize(static_cast<size_t>(n) * elem_size(ct));
      d_copy = std::make_unique<DeviceBuffer<unsigned char>>(copy.size());  // NaN until the first step writes it
    }
  }
  // New gradients, in [-1, 1) times the loss scale, rounded to the gradient type.
  void new_grads(uint64_t seed, double loss_scale) {
    with_type(gt, [&](auto tag) {
      using G = decltype(tag);
      std::vector<G> g = random_vec<G>(static_cast<size_t>(n), seed, -loss_scale, loss_scale);
      std::memcpy(grad.data(), g.data(), grad.size());
    });
    d_grad->upload(grad);
  }
  kg::ParamSlot slot(bool momentum_or_adam) const {
    kg::ParamSlot s;
    s.grad = d_grad->get();
    s.grad_type = gt;
    s.master = d_master->get();
    s.state1 = momentum_or_adam ? d_s1->get() : nullptr;
    s.state2 = d_s2 ? d_s2->get() : nullptr;
    s.copy = d_copy ? d_copy->get() : nullptr;
    s.copy_type = ct;
    s.n = n;
    return s;
  }
  template <class Body> void cpu(Body body) {  // body(const G* grad, W* copy) with W = float when no copy
    with_type(gt, [&](auto gtag) {
      using G = decltype(gtag);
      const G* g = reinterpret_cast<const G*>(grad.data());
      if (ct == ElemType::None) {
        body(g, static_cast<float*>(nullptr));
      } else {
        with_type(ct, [&](auto wtag) {
          using W = decltype(wtag);
          body(g, reinterpret_cast<W*>(copy.data()));
        });
      }
    });
  }
};

std::vector<std::unique_ptr<TestParam>> make_params(bool two_states) {
  std::vector<std::unique_ptr<TestParam>> ps;
  // FP16 weights with FP16 gradients, odd and spanning many chunks; an FP32 parameter that is
  // its own value (batch-norm gamma); BF16 of exactly one chunk; FP64 gradients with an FP32
  // copy; a single element with an FP16 copy of an FP32 gradient.
  ps.push_back(std::make_unique<TestParam>(ElemType::F16, ElemType::F16, 1000003, 1, two_states));
  ps.push_back(std::make_unique<TestParam>(ElemType::F32, ElemType::None, 5, 2, two_states));
  ps.push_back(std::make_unique<TestParam>(ElemType::BF16, ElemType::BF16, kg::MultiTensorPlan::kChunk, 3, two_states));
  ps.push_back(std::make_unique<TestParam>(ElemType::F64, ElemType::F32, 33, 4, two_states));
  ps.push_back(std::make_unique<TestParam>(ElemType::F32, ElemType::F16, 1, 5, two_states));
  return ps;
}

// Bounds. Both sides run kernels::sgd_update / adam_update in FP32 on identical inputs, but
// either compiler may contract a*b + c into one FMA (one rounding instead of two): nvcc does by
// default, and so does g++ for C++ (-ffp-contract=fast is its default even under -std=c++17;
// only ISO C modes turn it off) wherever -march gives it FMA, each at places of its own choosing.
// The bound assumes nothing about which side contracts where: any of the few roundings in an
// update may differ, so each step may differ by a few units of FP32 roundoff u = 2^-24 in every
// updated quantity, and the differences carry into later steps. Per step we allow 8 u of
// the quantity's magnitude: for the master, |w| + 10 lr (an update is at most a few lr:
// |m_hat / sqrt(v_hat)| <= ~3 for Adam, |d| <= ~10 for SGD with momentum 0.9 and unit
// gradients); for state, the largest |state| of that parameter (a momentum can cancel to
// near zero, so per-element relative error means nothing there). Compute copies are one
// rounding of the master: bit-identical to convert<W>(GPU master), and within the master
// bound plus one rounding (2 u_W |w|) of the CPU's copy.
void compare(TestParam& p, int steps, double lr, const std::string& what) {
  INFO(what << ": parameter of " << p.n << " elements, grad " << kg::elem_type_name(p.gt) << ", copy "
            << kg::elem_type_name(p.ct));
  const double u = unit_roundoff<float>(), rel = 8 * steps * u;
  std::vector<float> gm = p.d_master->download();
  std::vector<double> sc(gm.size());
  for (size_t i = 0; i < gm.size(); ++i) sc[i] = std::fabs(p.master[i]) + 10 * lr;
  expect_close(gm, to_d(p.master), rel, 0.0, "master", &sc);
  auto state = [&](const std::vector<float>& want, DeviceBuffer<float>& dev, const char* name) {
    std::vector<double> w = to_d(want);
    std::vector<double> s(w.size(), max_abs(w));
    expect_close(dev.download(), w, rel, 1e-30, name, &s);
  };
  if (!p.s1.empty() && max_abs(to_d(p.s1)) > 0) state(p.s1, *p.d_s1, "state1");
  if (p.d_s2) state(p.s2, *p.d_s2, "state2");
  if (p.ct != ElemType::None) {
    std::vector<unsigned char> raw = p.d_copy->download();
    with_type(p.ct, [&](auto wtag) {
      using W = decltype(wtag);
      std::vector<W> got(static_cast<size_t>(p.n)), cpu(static_cast<size_t>(p.n)), from_gpu_master(got.size());
      std::memcpy(got.data(), raw.data(), raw.size());
      std::memcpy(cpu.data(), p.copy.data(), p.copy.size());
      for (size_t i = 0; i < got.size(); ++i) from_gpu_master[i] = kernels::convert<W>(gm[i]);
      expect_bits_equal(got, from_gpu_master, "compute copy = convert(GPU master)");
      std::vector<double> s2(got.size());
      for (size_t i = 0; i < got.size(); ++i)
        s2[i] = rel * (std::fabs(p.master[i]) + 10 * lr) + 2 * unit_roundoff<W>() * std::fabs(p.master[i]);
      expect_close(got, to_d(cpu), 1.0, 0.0, "compute copy vs CPU", &s2);
    });
  }
}

}  // namespace

TEST_CASE("fused multi-tensor SGD matches the CPU twin", "[cuda][sanitize]") {
  const double loss_scale = 1024;
  for (bool momentum : {true, false}) {
    INFO("momentum " << momentum);
    kernels::SgdConfig cfg;
    cfg.lr = 0.05;
    cfg.momentum = momentum ? 0.9 : 0.0;
    cfg.weight_decay = momentum ? 1e-4 : 0.0;
    cfg.nesterov = momentum;
    auto ps = make_params(false);
    std::vector<kg::ParamSlot> slots;
    for (auto& p : ps) slots.push_back(p->slot(momentum));
    kg::MultiTensorPlan plan(slots, stream());
    CHECK(plan.chunks() == (1000003 + 8191) / 8192 + 1 + 1 + 1 + 1);
    DeviceBuffer<float> inv(std::vector<float>{static_cast<float>(1 / loss_scale)});
    DeviceBuffer<int> found(std::vector<int>{0});
    DeviceBuffer<int64_t> step(std::vector<int64_t>{0});
    const int steps = 3;
    for (int t = 0; t < steps; ++t) {
      for (size_t i = 0; i < ps.size(); ++i) ps[i]->new_grads(100 + 10 * t + i, loss_scale);
      kg::StepScalars sc;
      sc.inv_scale = inv.get();
      sc.found_inf = found.get();
      if (momentum) sc.step = step.get();  // first step decided on the device
      else sc.first_step = t == 0;         // ... or by the host
      kg::multi_sgd_step(plan, cfg, sc, stream());
      kg::advance_step(step.get(), found.get(), stream());
      for (auto& p : ps)
        p->cpu([&](auto* g, auto* copy) {
          kc::sgd_step(p->n, g, static_cast<float>(1 / loss_scale), p->master.data(),
                       momentum ? p->s1.data() : static_cast<float*>(nullptr), copy, t == 0, cfg);
        });
    }
    CHECK(step.download()[0] == steps);
    for (auto& p : ps) compare(*p, steps, cfg.lr, "SGD");
  }
}

TEST_CASE("fused multi-tensor Adam and AdamW match the CPU twin", "[cuda]") {
  const double loss_scale = 65536;
  for (bool decoupled : {false, true}) {
    INFO((decoupled ? "AdamW" : "Adam"));
    kernels::AdamConfig cfg;
    cfg.lr = 1e-3;
    cfg.weight_decay = decoupled ? 0.05 : 1e-2;
    cfg.decoupled = decoupled;
    auto ps = make_params(true);
    std::vector<kg::ParamSlot> slots;
    for (auto& p : ps) slots.push_back(p->slot(true));
    kg::MultiTensorPlan plan(slots, stream());
    DeviceBuffer<float> inv(std::vector<float>{static_cast<float>(1 / loss_scale)});
    DeviceBuffer<int> found(std::vector<int>{0});
    DeviceBuffer<int64_t> step(std::vector<int64_t>{0});
    const int steps = 3;
    for (int t = 0; t < steps; ++t) {
      // FP16 gradients of unit size times 65536 would overflow: use a smaller spread there.
      for (size_t i = 0; i < ps.size(); ++i)
        ps[i]->new_grads(200 + 10 * t + i, ps[i]->gt == ElemType::F16 ? 1024.0 : loss_scale);
      kernels::AdamConfig host = cfg;
      host.bias_correction1 = 1.0 - std::pow(cfg.beta1, t + 1);
      host.bias_correction2 = 1.0 - std::pow(cfg.beta2, t + 1);
      kg::StepScalars sc;
      sc.inv_scale = inv.get();
      sc.found_inf = found.get();
      if (!decoupled) sc.step = step.get();  // bias corrections from the device step count
      kg::multi_adam_step(plan, decoupled ? host : cfg, sc, stream());
      kg::advance_step(step.get(), found.get(), stream());
      for (auto& p : ps)
        p->cpu([&](auto* g, auto* copy) {
          kc::adam_step(p->n, g, static_cast<float>(1 / loss_scale), p->master.data(), p->s1.data(), p->s2.data(),
                        copy, host);
        });
    }
    for (auto& p : ps) compare(*p, steps, cfg.lr, decoupled ? "AdamW" : "Adam");
  }
}

TEST_CASE("a set found_inf flag skips the whole fused step on the device", "[cuda][sanitize]") {
  auto ps = make_params(true);
  std::vector<kg::ParamSlot> slots;
  for (auto& p : ps) slots.push_back(p->slot(true));
  kg::MultiTensorPlan plan(slots, stream());
  DeviceBuffer<int> found(std::vector<int>{0});
  DeviceBuffer<int64_t> step(std::vector<int64_t>{0});
  for (size_t i = 0; i < ps.size(); ++i) ps[i]->new_grads(300 + i, 8.0);

  // Finite gradients: the flag stays clear. One inf (BF16, the last element of its chunk)
  // or one NaN (FP64) sets it.
  kg::multi_all_finite(plan, found.get(), stream());
  CHECK(found.download()[0] == 0);
  {
    std::vector<unsigned char> g = ps[2]->grad;
    const uint16_t inf_bits = 0x7f80;
    std::memcpy(g.data() + g.size() - 2, &inf_bits, 2);
    ps[2]->d_grad->upload(g);
    kg::multi_all_finite(plan, found.get(), stream());
    CHECK(found.download()[0] == 1);
    ps[2]->d_grad->upload(ps[2]->grad);
    found.upload({0});
    g = ps[3]->grad;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::memcpy(g.data() + 8 * 17, &nan, 8);
    ps[3]->d_grad->upload(g);
    kg::multi_all_finite(plan, found.get(), stream());
    CHECK(found.download()[0] == 1);
  }

  // With the flag set, nothing changes: masters, state, copies, the step count.
  std::vector<std::vector<float>> m0, s10, s20;
  std::vector<std::vector<unsigned char>> c0;
  for (auto& p : ps) {
    m0.push_back(p->d_master->download());
    s10.push_back(p->d_s1->download());
    s20.push_back(p->d_s2->download());
    c0.push_back(p->d_copy ? p->d_copy->download() : std::vector<unsigned char>{});
  }
  kg::StepScalars sc;
  sc.found_inf = found.get();
  sc.step = step.get();
  kg::multi_adam_step(plan, kernels::AdamConfig{}, sc, stream());
  kernels::SgdConfig sgd;
  sgd.momentum = 0.9;
  kg::multi_sgd_step(plan, sgd, sc, stream());
  kg::advance_step(step.get(), found.get(), stream());
  CHECK(step.download()[0] == 0);
  for (size_t i = 0; i < ps.size(); ++i) {
    expect_bits_equal(ps[i]->d_master->download(), m0[i], "master unchanged");
    expect_bits_equal(ps[i]->d_s1->download(), s10[i], "state1 unchanged");
    expect_bits_equal(ps[i]->d_s2->download(), s20[i], "state2 unchanged");
    if (ps[i]->d_copy) expect_bits_equal(ps[i]->d_copy->download(), c0[i], "copy unchanged");
  }
}

TEST_CASE("plan and step arguments are checked", "[cuda]") {
  auto ps = make_params(false);
  std::vector<kg::ParamSlot> slots;
  for (auto& p : ps) slots.push_back(p->slot(false));
  kg::MultiTensorPlan plan(slots, stream());
  kernels::SgdConfig cfg;
  cfg.momentum = 0.9;
  CHECK_THROWS_WITH(kg::multi_sgd_step(plan, cfg, kg::StepScalars{}, stream()), Catch::Contains("momentum buffer"));
  CHECK_THROWS_WITH(kg::multi_adam_step(plan, kernels::AdamConfig{}, kg::StepScalars{}, stream()),
                    Catch::Contains("exp_avg"));
  slots[0].master = nullptr;
  CHECK_THROWS_WITH(kg::MultiTensorPlan(slots, stream()), Catch::Contains("needs a gradient and a master"));
}

// ---- the caching allocator ---------------------------------------------------------------------

TEST_CASE("size classes: 512 B steps to 1 MiB, then 8 per power of two", "[cuda]") {
  using A = kg::CachingAllocator;
  CHECK(A::round_size(1) == 512);
  CHECK(A::round_size(512) == 512);
  CHECK(A::round_size(513) == 1024);
  CHECK(A::round_size(1 << 20) == (1 << 20));
  CHECK(A::round_size((1 << 20) + 1) == (1 << 20) + (1 << 17));
  CHECK(A::round_size(3 << 20) == (3 << 20));
  CHECK(A::round_size((3 << 20) + 1) == (3 << 20) + (1 << 18));
  CHECK(A::round_size(size_t(1) << 40) == (size_t(1) << 40));
  for (size_t b : {size_t(1), size_t(777), size_t(1) << 20, (size_t(5) << 20) + 3, (size_t(1) << 33) + 12345}) {
    const size_t r = A::round_size(b);
    CHECK(r >= b);
    CHECK(r - b <= b / 8 + 512);  // at most 12.5% (or 512 B) wasted
  }
}

TEST_CASE("the caching allocator reuses freed blocks and counts bytes by kind", "[cuda]") {
  engine::register_cuda_backend();
  kg::CachingAllocator& a = kg::cuda_allocator();
  CHECK(&engine::allocator_for(engine::Device::cuda(0)) == &a);
  CHECK(a.device() == engine::Device::cuda(0));

  using engine::MemKind;
  const auto& st = a.stats();
  const int64_t act0 = st.current[static_cast<int>(MemKind::Activations)];
  const int64_t w0 = st.current[static_cast<int>(MemKind::Weights)];

  void* p = a.allocate(1000, MemKind::Activations);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 256 == 0);
  CHECK(st.current[static_cast<int>(MemKind::Activations)] == act0 + 1000);  // requested bytes
  a.deallocate(p, 1000, MemKind::Activations);
  CHECK(st.current[static_cast<int>(MemKind::Activations)] == act0);

  // Same class (1024 B): no cudaMalloc, the same block back.
  const int64_t mallocs = a.malloc_count();
  void* q = a.allocate(900, MemKind::Weights);
  CHECK(q == p);
  CHECK(a.malloc_count() == mallocs);
  CHECK(st.current[static_cast<int>(MemKind::Weights)] == w0 + 900);
  CHECK(st.peak[static_cast<int>(MemKind::Weights)] >= w0 + 900);
  // A large block, freed and asked for again (a smaller request of the same class).
  void* big = a.allocate((size_t(3) << 20) + 7, MemKind::Workspace);
  const int64_t mallocs2 = a.malloc_count();
  a.deallocate(big, (size_t(3) << 20) + 7, MemKind::Workspace);
  void* big2 = a.allocate((size_t(3) << 20) + 100, MemKind::Workspace);
  CHECK(big2 == big);
  CHECK(a.malloc_count() == mallocs2);
  // The memory works: write and read it.
  kg::fill(static_cast<float*>(q), 3.0, 225, stream());
  std::vector<float> back(225);
  sync();
  CHECK_CUDA(cudaMemcpy(back.data(), q, 225 * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(back == std::vector<float>(225, 3.f));
  a.deallocate(q, 900, MemKind::Weights);
  a.deallocate(big2, (size_t(3) << 20) + 100, MemKind::Workspace);
  CHECK(st.current[static_cast<int>(MemKind::Weights)] == w0);

  // Workspaces taken by kernels are all given back.
  const int64_t ws0 = st.current[static_cast<int>(MemKind::Workspace)];
  {
    DeviceBuffer<float> x(std::vector<float>(100000, 1.f));
    DeviceBuffer<float> s(1);
    kg::sum(x.get(), 100000, s.get(), stream());
    CHECK(s.download()[0] == 100000.f);
  }
  CHECK(st.current[static_cast<int>(MemKind::Workspace)] == ws0);

  // empty_cache returns every cached block to the driver.
  CHECK(a.cached_bytes() > 0);
  const int64_t frees = a.free_count();
  a.empty_cache();
  CHECK(a.cached_bytes() == 0);
  CHECK(a.free_count() > frees);
  CHECK(a.reserved_bytes() >= 0);
}

TEST_CASE("out of device memory is a clear engine::Error, and the allocator still works after it", "[cuda]") {
  kg::CachingAllocator& a = kg::cuda_allocator();
  const size_t tib = size_t(1) << 40;
  const int64_t act0 = a.stats().current[static_cast<int>(engine::MemKind::Activations)];
  try {
    a.allocate(tib, engine::MemKind::Activations);
    FAIL("allocating 1 TiB succeeded");
  } catch (const engine::Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Catch::Contains("CUDA out of memory: requested 1048576.0 MiB for activations"));
    CHECK_THAT(msg, Catch::Contains("in use: weights"));
    CHECK_THAT(msg, Catch::Contains("gradients"));
    CHECK_THAT(msg, Catch::Contains("optimizer state"));
    CHECK_THAT(msg, Catch::Contains("cached"));
  }
  CHECK(a.stats().current[static_cast<int>(engine::MemKind::Activations)] == act0);
  CHECK(cudaGetLastError() == cudaSuccess);  // the failed cudaMalloc left no error behind
  void* p = a.allocate(4096, engine::MemKind::Activations);
  CHECK(p != nullptr);
  a.deallocate(p, 4096, engine::MemKind::Activations);
}

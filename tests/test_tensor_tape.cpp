// Tensors (views, copies, memory accounting by kind) and the tape's bookkeeping: recording
// only when asked, accumulation into leaves, persistence until zeroed, freeing saved tensors.
#include <vector>

#include "catch2/catch.hpp"
#include "engine/allocator.h"
#include "engine/nn.h"
#include "engine/ops.h"
#include "engine/random.h"

using engine::DType;
using engine::MemKind;
using engine::Tensor;

namespace {
int64_t cpu_bytes(MemKind k) { return engine::allocator_for(engine::Device::cpu()).stats().current[static_cast<int>(k)]; }
int64_t cpu_total() { return engine::allocator_for(engine::Device::cpu()).stats().total_current; }
}  // namespace

TEST_CASE("tensors: shape, views share storage, slices, copies", "[tensor]") {
  Tensor t = Tensor::from_vector({0, 1, 2, 3, 4, 5}, {2, 3}, DType::F32);
  CHECK(t.numel() == 6);
  CHECK(t.dim(-1) == 3);
  Tensor v = t.view({3, 2});
  CHECK(v.same_storage(t));
  v.data<float>()[5] = 50.f;
  CHECK(t.to_vector()[5] == 50.0);
  Tensor row = t.slice0(1, 2);
  CHECK(row.shape() == engine::Shape{1, 3});
  CHECK(row.to_vector() == std::vector<double>{3, 4, 50});
  Tensor c = t.clone();
  c.data<float>()[0] = 9.f;
  CHECK(t.to_vector()[0] == 0.0);
  CHECK_THROWS_AS(t.view({4, 2}), engine::Error);
  CHECK_THROWS_AS(t.data<double>(), engine::Error);
  CHECK_THROWS_AS(Tensor::empty({2, -1}, DType::F32), engine::Error);
}

TEST_CASE("from_vector rounds once to the storage dtype", "[tensor]") {
  // 1 + 2^-11 is the tie between 1 and the next half: round-to-nearest-even gives 1.
  Tensor h = Tensor::from_vector({1.0 + 1.0 / 2048, 65504.0, 1e-9}, {3}, DType::F16);
  CHECK(h.to_vector() == std::vector<double>{1.0, 65504.0, 0.0});
}

TEST_CASE("the allocator counts current and peak bytes by kind", "[tensor][memory]") {
  auto& alloc = engine::allocator_for(engine::Device::cpu());
  const int64_t weights0 = cpu_bytes(MemKind::Weights), act0 = cpu_bytes(MemKind::Activations);
  alloc.reset_peak();
  {
    Tensor w = Tensor::empty({100}, DType::F32, engine::Device::cpu(), MemKind::Weights);
    CHECK(cpu_bytes(MemKind::Weights) == weights0 + 400);
    {
      engine::MemKindScope scope(MemKind::Workspace);
      Tensor ws = Tensor::empty({10}, DType::F16);
      CHECK(ws.mem_kind() == MemKind::Workspace);
    }
    Tensor a = Tensor::empty({50}, DType::F64);  // default kind: activations
    CHECK(cpu_bytes(MemKind::Activations) == act0 + 400);
  }
  CHECK(cpu_bytes(MemKind::Weights) == weights0);
  CHECK(cpu_bytes(MemKind::Activations) == act0);
  CHECK(alloc.stats().peak[static_cast<int>(MemKind::Weights)] >= weights0 + 400);
  CHECK(alloc.stats().peak[static_cast<int>(MemKind::Workspace)] >= 20);
}

TEST_CASE("the CPU cache, once full, gives up the sizes unused for longest", "[tensor][memory]") {
  // A private allocator whose cache may hold 1 MiB (twice the 512 KiB live peak below is 1 MiB
  // too): four sizes of about 256 KiB, each freed before the next is taken, fill it; after the
  // first is used again, freeing a 512 KiB block must evict the two sizes unused for longest
  // rather than drop the newest block, which is what a long-lived process needs when its
  // shapes change (a new model, another test).
  const size_t kib = 1024;
  engine::CpuCachingAllocator alloc(1024 * kib);
  const size_t sizes[4] = {256 * kib, 256 * kib - 64, 256 * kib - 128, 256 * kib - 192};
  for (size_t bytes : sizes) alloc.deallocate(alloc.allocate(bytes, MemKind::Activations), bytes, MemKind::Activations);
  CHECK(alloc.cached_bytes() == 1024 * kib - 384);
  const int64_t fresh0 = alloc.stats().system_allocations;
  void* p = alloc.allocate(sizes[0], MemKind::Activations);  // a cache hit: sizes[0] is now the newest
  CHECK(alloc.stats().system_allocations == fresh0);
  CHECK(alloc.cached_bytes() == 768 * kib - 384);
  alloc.deallocate(p, sizes[0], MemKind::Activations);
  void* big = alloc.allocate(512 * kib, MemKind::Activations);
  alloc.deallocate(big, 512 * kib, MemKind::Activations);
  // sizes[1] and [2] went (1 MiB - 384 + 512 KiB did not fit; without those two it does).
  CHECK(alloc.cached_bytes() == 512 * kib + sizes[0] + sizes[3]);
  CHECK(alloc.allocate(512 * kib, MemKind::Activations) == big);
  CHECK(alloc.cached_bytes() == sizes[0] + sizes[3]);
  const int64_t fresh1 = alloc.stats().system_allocations;
  void* gone = alloc.allocate(sizes[1], MemKind::Activations);  // evicted: from the system again
  CHECK(alloc.stats().system_allocations == fresh1 + 1);
  alloc.deallocate(gone, sizes[1], MemKind::Activations);
  alloc.deallocate(big, 512 * kib, MemKind::Activations);
  alloc.release_cached();
  CHECK(alloc.cached_bytes() == 0);
}

TEST_CASE("the CPU cache holds a step whose blocks add up to more than its peak", "[tensor][memory]") {
  // One "step": a and b live together (the peak, 800 KiB), a freed, then a temporary c taken
  // and everything freed: 1,100 KiB of blocks for an 800 KiB peak. Bounded by the peak itself,
  // the cache evicted a's and b's size when c came back, and every step took them from the
  // system again. From the second step on: none.
  const size_t kib = 1024;
  engine::CpuCachingAllocator alloc(64 * kib);
  int64_t fresh_after_first = 0;
  for (int step = 1; step <= 5; ++step) {
    void* a = alloc.allocate(400 * kib, MemKind::Activations);
    void* b = alloc.allocate(400 * kib, MemKind::Activations);
    alloc.deallocate(a, 400 * kib, MemKind::Activations);
    void* c = alloc.allocate(300 * kib, MemKind::Workspace);
    alloc.deallocate(b, 400 * kib, MemKind::Activations);
    alloc.deallocate(c, 300 * kib, MemKind::Workspace);
    if (step == 1) fresh_after_first = alloc.stats().system_allocations;
    INFO("step " << step);
    CHECK(alloc.stats().system_allocations == fresh_after_first);
  }
  CHECK(fresh_after_first == 3);
  CHECK(alloc.stats().total_peak == int64_t(800 * kib));
  alloc.release_cached();
}

TEST_CASE("nothing is recorded without a tape or under NoGradScope", "[tape]") {
  Tensor x = Tensor::from_vector({1, -2, 3}, {3}, DType::F64);
  x.set_requires_grad(true);
  Tensor y = engine::relu(x);
  CHECK_FALSE(y.requires_grad());
  engine::Tape tape;
  engine::TapeScope scope(tape);
  {
    engine::NoGradScope no_grad;
    Tensor z = engine::relu(x);
    CHECK_FALSE(z.requires_grad());
  }
  CHECK(tape.size() == 0);
  Tensor c = Tensor::from_vector({1, 2, 3}, {3}, DType::F64);  // needs no gradient
  engine::relu(c);
  CHECK(tape.size() == 0);
  Tensor w = engine::relu(x);
  CHECK(w.requires_grad());
  CHECK(tape.size() == 1);
}

TEST_CASE("leaf gradients accumulate across backward calls until zeroed", "[tape]") {
  Tensor x = Tensor::from_vector({1, -2, 3}, {3}, DType::F64);
  x.set_requires_grad(true);
  for (int round = 1; round <= 2; ++round) {
    engine::Tape tape;
    Tensor loss;
    {
      engine::TapeScope scope(tape);
      loss = engine::sum(engine::add(engine::scale(x, 2.0), engine::relu(x)));
    }
    tape.backward(loss);
    CHECK(tape.size() == 0);
    // d/dx (2x + relu(x)) = 2 + [x > 0]; the second round adds to the first.
    CHECK(x.grad().to_vector() == std::vector<double>{3.0 * round, 2.0 * round, 3.0 * round});
    CHECK(x.grad().mem_kind() == MemKind::Gradients);
  }
  x.zero_grad();
  CHECK(x.grad().to_vector() == std::vector<double>{0, 0, 0});
}

TEST_CASE("backward frees saved tensors, and the root must need a gradient", "[tape][memory]") {
  engine::manual_seed(11);
  Tensor x = engine::uniform({64, 8, 8, 4}, -1, 1, DType::F32);
  Tensor w = engine::uniform({8, 3, 3, 4}, -1, 1, DType::F32);
  w.set_requires_grad(true);
  const int64_t before = cpu_total();
  engine::Tape tape;
  {
    Tensor loss;
    {
      engine::TapeScope scope(tape);
      loss = engine::sum(engine::relu(engine::conv2d(x, w, Tensor(), 1, 1)));
    }
    CHECK(cpu_total() > before + 64 * 8 * 8 * 8 * 4);  // conv output and relu output are held
    tape.backward(loss);
  }
  // Only the weight's gradient remains.
  CHECK(cpu_total() == before + static_cast<int64_t>(w.nbytes()));
  Tensor c = Tensor::full({1}, 2.0, DType::F32);
  CHECK_THROWS_WITH(tape.backward(c), Catch::Contains("does not require grad"));
}

TEST_CASE("an output nobody consumes gets no gradient and does not break backward", "[tape]") {
  Tensor x = Tensor::from_vector({1, 2}, {2}, DType::F64);
  x.set_requires_grad(true);
  engine::Tape tape;
  Tensor loss;
  {
    engine::TapeScope scope(tape);
    engine::relu(x);  // result dropped
    loss = engine::sum(engine::scale(x, 3.0));
  }
  tape.backward(loss);
  CHECK(x.grad().to_vector() == std::vector<double>{3, 3});
}

TEST_CASE("modules name their parameters and switch train/eval", "[nn]") {
  engine::manual_seed(3);
  engine::Sequential net;
  net.add(std::make_shared<engine::Conv2d>(3, 4, 3, 1, 1))
      .add(std::make_shared<engine::BatchNorm2d>(4))
      .add(std::make_shared<engine::ReLU>())
      .add(std::make_shared<engine::Flatten>())
      .add(std::make_shared<engine::Dropout>(0.5))
      .add(std::make_shared<engine::Linear>(4 * 5 * 5, 10));
  std::vector<std::string> names;
  for (auto& [name, p] : net.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias", "5.weight", "5.bias"});
  CHECK(net.num_parameters() == 4 * 3 * 3 * 3 + 4 + 4 + 4 + 100 * 10 + 10);
  Tensor x = engine::uniform({2, 5, 5, 3}, -1, 1, DType::F32);
  net.eval();
  const auto y1 = net(x).to_vector();
  const auto y2 = net(x).to_vector();
  CHECK(y1 == y2);  // eval: no dropout, running statistics
  net.train();
  CHECK(net(x).to_vector() != net(x).to_vector());  // a fresh dropout mask per call
}

TEST_CASE("compute copies: FP16 values beside FP32 masters, batch-norm stays FP32", "[nn]") {
  engine::manual_seed(4);
  engine::Sequential net;
  net.add(std::make_shared<engine::Conv2d>(3, 4, 3)).add(std::make_shared<engine::BatchNorm2d>(4));
  net.set_compute_dtype(DType::F16);
  auto params = net.parameters();
  CHECK(params[0]->value.dtype() == DType::F16);
  CHECK(params[0]->master.dtype() == DType::F32);
  CHECK_FALSE(params[0]->value.same_storage(params[0]->master));
  CHECK(params[2]->value.same_storage(params[2]->master));  // BN gamma stays FP32
  const auto m = params[0]->master.to_vector(), v = params[0]->value.to_vector();
  for (size_t i = 0; i < m.size(); ++i) CHECK(v[i] == static_cast<float>(engine::half(static_cast<float>(m[i]))));
  net.set_compute_dtype(DType::F32);
  CHECK(params[0]->value.same_storage(params[0]->master));
}

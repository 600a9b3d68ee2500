// No page faults in the steady state: after warm-up, training steps on the CPU reuse cached
// tensor blocks (engine/allocator.cpp) and grow-only kernel scratch (kernels/cpu/scratch.h),
// so steps 11 to 20 take no fresh page from the system.
#include <sys/resource.h>

#include <vector>

#include "catch2/catch.hpp"
#include "engine/amp.h"
#include "engine/random.h"
#include "models/models.h"

using engine::DType;
using engine::Tensor;

namespace {
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}
}  // namespace

TEST_CASE("CPU training steps 10 to 20 cause no page faults (FP32 and FP16 with the scaler)", "[memory]") {
  for (DType dt : {DType::F32, DType::F16}) {
    INFO(engine::dtype_name(dt));
    engine::manual_seed(3);
    auto model = models::simplecnn();
    model->set_compute_dtype(dt);
    engine::Adam opt(model->parameters(), 1e-3);
    engine::LossScalerConfig cfg;
    cfg.enabled = dt == DType::F16;
    engine::LossScaler scaler(cfg);
    const Tensor x = engine::cast(engine::uniform({256, 32, 32, 3}, -1, 1, DType::F32), dt);
    std::vector<int32_t> labels(256);
    for (int i = 0; i < 256; ++i) labels[i] = i % 10;
    const Tensor y = Tensor::from_ints(labels, {256});
    long before = 0;
    for (int step = 1; step <= 20; ++step) {
      if (step == 11) before = minor_faults();
      opt.zero_grad();
      engine::Tape tape;
      {
        engine::TapeScope rec(tape);
        engine::AutocastScope autocast(dt);
        tape.backward(scaler.scale(engine::cross_entropy((*model)(x), y)));
      }
      scaler.step(opt);
      scaler.update();
    }
    // Zero from the engine (36,800 over these ten steps without the cache). A few are allowed
    // for what the kernel counts without the program causing it (NUMA balancing hints, page
    // migration by compaction), so the test does not flake on a busy host.
    const long faults = minor_faults() - before;
    REQUIRE(faults <= 64);
  }
}

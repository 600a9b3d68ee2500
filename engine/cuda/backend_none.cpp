// The CPU-only build's side of engine/device.h and engine/cuda/backend.h: no device is
// found, and every device operation says there is no CUDA backend (nothing calls them for
// CPU tensors).
#include "engine/cuda/backend.h"
#include "engine/device.h"

namespace engine {

bool cuda_built() { return false; }
int cuda_device_count(std::string* why) {
  if (why) *why = "this build has no CUDA backend (configured with ENGINE_CUDA=OFF or no toolkit found)";
  return 0;
}
void set_cuda_deterministic(bool) {}  // the CPU repeats bit for bit anyway
std::string cuda_library_versions() {
  return "CUDA backend: not built (configured with ENGINE_CUDA=OFF, or no toolkit/cuDNN found)\n";
}
void register_cuda_backend() {}
void device_copy(void*, Device dst_dev, const void*, Device src_dev, size_t) {
  ENGINE_FAIL("copy between " << src_dev.str() << " and " << dst_dev.str() << " needs the CUDA backend");
}
void device_memset_zero(void*, Device dev, size_t) { ENGINE_FAIL("memset on " << dev.str() << " needs the CUDA backend"); }
bool device_fill(void*, Device dev, DType, double, int64_t) {
  ENGINE_FAIL("fill on " << dev.str() << " needs the CUDA backend");
}

}  // namespace engine

namespace engine::cuda {

namespace {
[[noreturn]] void no_cuda() { ENGINE_FAIL("this build has no CUDA backend (configured with ENGINE_CUDA=OFF)"); }
}  // namespace

std::unique_ptr<OptimizerPlan> make_optimizer_plan() { no_cuda(); }
std::unique_ptr<CounterMirror> make_counter_mirror() { no_cuda(); }
void scale_by_device_scalar(const Tensor&, const Tensor&, Tensor&) { no_cuda(); }
void scaler_prepare(const Tensor&, Tensor&, Tensor&) { no_cuda(); }
void clip_scale(const Tensor&, double, const Tensor&, const Tensor&, Tensor&, Tensor&) { no_cuda(); }
void scaler_update(Tensor&, Tensor&, Tensor&, Tensor&, const Tensor&, const kernels::ScalerRule&) { no_cuda(); }

}  // namespace engine::cuda

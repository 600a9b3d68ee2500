// Device discovery and copies; the CUDA calls live in kernels/cuda and are linked only
// in a CUDA build.
#include "engine/device.h"

#include <cstdlib>

#include "engine/error.h"

#ifdef ENGINE_WITH_CUDA
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/runtime.h"
#endif

namespace engine {

bool cuda_built() {
#ifdef ENGINE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count(std::string* why) {
#ifdef ENGINE_WITH_CUDA
  return kernels::cuda::device_count(why);
#else
  if (why) *why = "this build has no CUDA backend (configured with ENGINE_CUDA=OFF or no toolkit found)";
  return 0;
#endif
}

Device parse_device(const std::string& spec) {
  if (spec == "cpu") return Device::cpu();
  if (spec == "auto") {
    std::string why;
    return cuda_device_count(&why) > 0 ? Device::cuda(0) : Device::cpu();
  }
  if (spec.rfind("cuda", 0) == 0) {
    int index = 0;
    if (spec.size() > 4) {
      ENGINE_CHECK(spec[4] == ':' && spec.size() > 5 &&
                       spec.find_first_not_of("0123456789", 5) == std::string::npos,
                   "bad device '" << spec << "' (expected auto, cpu, cuda or cuda:N)");
      index = std::atoi(spec.c_str() + 5);
    }
    std::string why;
    const int n = cuda_device_count(&why);
    ENGINE_CHECK(n > 0, "no CUDA device found: " << why);
    ENGINE_CHECK(index < n, "no CUDA device " << index << " (" << n << " present)");
    // One context and one allocator, both on the current device (device 0): other indices
    // would be labels only, so they are refused rather than silently run on device 0.
    ENGINE_CHECK(index == 0, "cuda:" << index << ": only cuda:0 is supported (run with CUDA_VISIBLE_DEVICES="
                                     << index << " to use that GPU as cuda:0)");
    return Device::cuda(index);
  }
  ENGINE_FAIL("bad device '" << spec << "' (expected auto, cpu, cuda or cuda:N)");
}

void set_cuda_deterministic(bool on) {
#ifdef ENGINE_WITH_CUDA
  kernels::cuda::set_deterministic(on);
#else
  (void)on;
#endif
}

std::string cuda_library_versions() {
#ifdef ENGINE_WITH_CUDA
  return kernels::cuda::library_versions();
#else
  return "CUDA backend: not built (configured with ENGINE_CUDA=OFF, or no toolkit/cuDNN found)\n";
#endif
}

void register_cuda_backend() {
#ifdef ENGINE_WITH_CUDA
  static const bool once = [] {
    register_cuda_allocator(&kernels::cuda::cuda_allocator());
    return true;
  }();
  (void)once;
#endif
}

void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
#ifdef ENGINE_WITH_CUDA
  kernels::cuda::copy(dst, dst_dev.is_cuda(), src, src_dev.is_cuda(), bytes);
#else
  (void)dst; (void)src; (void)bytes;
  ENGINE_FAIL("copy between " << src_dev.str() << " and " << dst_dev.str() << " needs the CUDA backend");
#endif
}

void device_memset_zero(void* dst, Device dev, size_t bytes) {
#ifdef ENGINE_WITH_CUDA
  (void)dev;
  // On the engine's stream (not the legacy default one): zero_grad runs every step.
  kernels::cuda::zero(dst, bytes, kernels::cuda::default_stream());
#else
  (void)dst; (void)bytes;
  ENGINE_FAIL("memset on " << dev.str() << " needs the CUDA backend");
#endif
}

bool device_fill(void* dst, Device dev, DType t, double value, int64_t n) {
#ifdef ENGINE_WITH_CUDA
  (void)dev;  // the context's device
  const auto stream = kernels::cuda::default_stream();
  switch (t) {
    case DType::F32: kernels::cuda::fill(static_cast<float*>(dst), value, n, stream); return true;
    case DType::F16: kernels::cuda::fill(static_cast<half*>(dst), value, n, stream); return true;
    case DType::BF16: kernels::cuda::fill(static_cast<bfloat16*>(dst), value, n, stream); return true;
    default: return false;
  }
#else
  (void)dst, (void)t, (void)value, (void)n;
  ENGINE_FAIL("fill on " << dev.str() << " needs the CUDA backend");
#endif
}

}  // namespace engine

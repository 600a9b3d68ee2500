// Parsing a device name. The rest of device.h (discovery, copies, fills) is the CUDA
// backend's: engine/cuda/backend.cpp in a CUDA build, engine/cuda/backend_none.cpp otherwise.
#include "engine/device.h"

#include <cstdlib>

#include "engine/error.h"

namespace engine {

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

}  // namespace engine

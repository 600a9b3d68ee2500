// [cuda] basics: the runtime wrappers copy bytes both ways and zero device memory.
#include <cuda_runtime.h>

#include <vector>

#include "catch2/catch.hpp"
#include "kernels/cuda/check.h"
#include "kernels/cuda/runtime.h"

TEST_CASE("host -> device -> host copy round-trips and memset zeroes", "[cuda]") {
  std::vector<float> host(1000), back(1000, -1.f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f - 3.f;
  void* dev = nullptr;
  CHECK_CUDA(cudaMalloc(&dev, host.size() * sizeof(float)));
  kernels::cuda::copy(dev, true, host.data(), false, host.size() * sizeof(float));
  kernels::cuda::copy(back.data(), false, dev, true, host.size() * sizeof(float));
  CHECK(back == host);
  kernels::cuda::memset_zero(dev, host.size() * sizeof(float));
  kernels::cuda::copy(back.data(), false, dev, true, host.size() * sizeof(float));
  CHECK(back == std::vector<float>(1000, 0.f));
  CHECK_CUDA(cudaFree(dev));
}

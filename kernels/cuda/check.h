// CHECK_CUDA: turns a failed CUDA runtime call into an engine::Error carrying file:line
// and the runtime's own message. CHECK_LAUNCH checks the last error after a kernel launch.
#pragma once

#include <cuda_runtime.h>

#include "engine/error.h"

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    cudaError_t check_cuda_status_ = (call);                                               \
    if (check_cuda_status_ != cudaSuccess) {                                               \
      ::engine::throw_error(std::string(#call) + " failed: " +                             \
                                cudaGetErrorString(check_cuda_status_), __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

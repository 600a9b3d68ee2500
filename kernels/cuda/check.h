// CHECK_CUDA: turns a failed CUDA runtime call into a kernels::Error carrying file:line
// and the runtime's own message. CHECK_LAUNCH checks the last error after a kernel launch.
// CHECK_CUDNN / CHECK_CUBLAS do the same for cuDNN and cuBLAS(Lt) statuses; they name
// library symbols only when expanded, so this header needs neither cudnn.h nor cublasLt.h
// (include those where the macros are used).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "kernels/error.h"

#define CHECK_CUDA(call)                                                                   \
  do {                                                                                     \
    cudaError_t check_cuda_status_ = (call);                                               \
    if (check_cuda_status_ != cudaSuccess) {                                               \
      ::kernels::throw_error(std::string(#call) + " failed: " +                             \
                                cudaGetErrorString(check_cuda_status_), __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)

#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

// cuDNN: the status string plus cuDNN 9's "last error" text, which names the failing
// check inside the library (e.g. which descriptor dimension it rejected).
#define CHECK_CUDNN(call)                                                                     \
  do {                                                                                        \
    cudnnStatus_t check_cudnn_status_ = (call);                                               \
    if (check_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                        \
      char check_cudnn_detail_[512] = {0};                                                    \
      cudnnGetLastErrorString(check_cudnn_detail_, sizeof check_cudnn_detail_);               \
      std::string check_cudnn_msg_ = std::string(#call) + " failed: " +                       \
                                     cudnnGetErrorString(check_cudnn_status_) + " (status " + \
                                     std::to_string(static_cast<int>(check_cudnn_status_)) + ")"; \
      if (check_cudnn_detail_[0]) check_cudnn_msg_ += std::string(": ") + check_cudnn_detail_; \
      ::kernels::throw_error(check_cudnn_msg_, __FILE__, __LINE__);                            \
    }                                                                                         \
  } while (0)

// cuBLAS and cuBLASLt share cublasStatus_t; cublasLtGetStatusName/String come with cublasLt.h.
#define CHECK_CUBLAS(call)                                                                       \
  do {                                                                                           \
    cublasStatus_t check_cublas_status_ = (call);                                                \
    if (check_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                         \
      ::kernels::throw_error(std::string(#call) + " failed: " +                                   \
                                cublasLtGetStatusName(check_cublas_status_) + " (" +             \
                                cublasLtGetStatusString(check_cublas_status_) + ")",             \
                            __FILE__, __LINE__);                                                 \
    }                                                                                            \
  } while (0)

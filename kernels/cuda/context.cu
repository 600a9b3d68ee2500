// Lazily created per-device contexts: stream, device properties, library handles.
#include "kernels/cuda/context.h"

#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cudnn.h>

#include <atomic>
#include <mutex>

#include "kernels/cuda/check.h"

namespace kernels::cuda {

namespace {
constexpr int kMaxDevices = 64;
std::mutex g_mu;
Context* g_contexts[kMaxDevices] = {};
std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_deterministic{false};
}  // namespace

Context::Context(int dev) : device(dev) {
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
  sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  cc_major = prop.major;
  cc_minor = prop.minor;
  total_memory = prop.totalGlobalMem;
  name = prop.name;
  CHECK_CUDA(cudaStreamCreate(&stream));
}

cudnnHandle_t Context::cudnn() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!cudnn_) {
    CHECK_CUDNN(cudnnCreate(&cudnn_));
    CHECK_CUDNN(cudnnSetStream(cudnn_, stream));
  }
  return cudnn_;
}

cublasLtHandle_t Context::cublaslt() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!cublaslt_) CHECK_CUBLAS(cublasLtCreate(&cublaslt_));
  return cublaslt_;
}

Context& context() {
  int dev = 0;
  CHECK_CUDA(cudaGetDevice(&dev));
  ENGINE_CHECK(dev >= 0 && dev < kMaxDevices, "CUDA device " << dev << " out of range");
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_contexts[dev]) g_contexts[dev] = new Context(dev);  // never deleted, see context.h
  return *g_contexts[dev];
}

cudaStream_t default_stream() { return context().stream; }

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow); }
bool allow_tf32() { return g_allow_tf32.load(); }
void set_deterministic(bool on) { g_deterministic.store(on); }
bool deterministic() { return g_deterministic.load(); }

void stream_synchronize(cudaStream_t stream) { CHECK_CUDA(cudaStreamSynchronize(stream)); }

}  // namespace kernels::cuda

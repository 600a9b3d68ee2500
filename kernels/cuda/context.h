// The per-device CUDA context: one stream that all engine work runs on, the cuDNN and
// cuBLASLt handles (created on first use), and the device facts kernels size their grids
// by. Free of CUDA headers, so engine code can include it without the toolkit's include path.
#pragma once

#include <cstddef>
#include <string>

// The CUDA, cuDNN and cuBLASLt handle types, declared exactly as their headers do.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct cudnnContext;
typedef struct cudnnContext* cudnnHandle_t;
struct cublasLtContext;
typedef struct cublasLtContext* cublasLtHandle_t;

namespace kernels::cuda {

class Context {
 public:
  int device = 0;
  // Created with cudaStreamCreate (a *blocking* stream): work on the legacy default stream,
  // such as the synchronous cudaMemcpy/cudaMemset of runtime.h, waits for it and vice versa,
  // so the engine's plain copies stay ordered with the kernels. All engine work goes here;
  // the caching allocator relies on that single stream order to reuse freed blocks at once.
  cudaStream_t stream = nullptr;
  int sm_count = 1;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  std::string name;

  cudnnHandle_t cudnn();        // created on first use
  cublasLtHandle_t cublaslt();  // created on first use

  explicit Context(int device);
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

 private:
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
};

// The context of the current device (cudaGetDevice), created on first call. Contexts are
// never destroyed: tearing handles down during static destruction, after the CUDA runtime
// may have unloaded, crashes more programs than it helps.
Context& context();
// Shorthand for context().stream.
cudaStream_t default_stream();

// TF32 for FP32 convolutions and matrix products (10-bit mantissa inputs, FP32 sums).
// Off by default, so FP32 mode is true FP32; PyTorch's allow_tf32 flags are the analogue.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Deterministic algorithms only (cuDNN's CUDNN_DETERMINISTIC ones; backward algorithms that add
// with atomics are passed over), so a run repeats bit for bit. Off by default, like PyTorch's
// cudnn.deterministic; our own kernels and cuBLASLt are deterministic either way.
void set_deterministic(bool on);
bool deterministic();

// Blocks the host until all work on `stream` has finished (checked).
void stream_synchronize(cudaStream_t stream);

}  // namespace kernels::cuda

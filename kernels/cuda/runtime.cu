// CUDA runtime wrappers: device discovery that never throws, checked copies and memset.
#include "kernels/cuda/runtime.h"

#include "kernels/cuda/check.h"

namespace kernels::cuda {

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t st = cudaGetDeviceCount(&n);
  if (st != cudaSuccess) {
    // Without a GPU the runtime returns an error and leaves n untouched.
    if (why) *why = cudaGetErrorString(st);
    cudaGetLastError();  // clear the sticky error so later checks are not confused
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA runtime reports 0 devices";
  return n;
}

void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) {
  const cudaMemcpyKind kind = dst_on_device ? (src_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                            : (src_on_device ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  CHECK_CUDA(cudaMemcpy(dst, src, bytes, kind));
}

void memset_zero(void* dst, size_t bytes) { CHECK_CUDA(cudaMemset(dst, 0, bytes)); }

void synchronize() { CHECK_CUDA(cudaDeviceSynchronize()); }

}  // namespace kernels::cuda

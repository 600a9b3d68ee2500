// CUDA runtime wrappers: device discovery that never throws, checked copies and memset, and a
// host mirror of a device counter that never waits.
#include "kernels/cuda/runtime.h"

#include <cublasLt.h>
#include <cudnn.h>
#include <link.h>

#include <sstream>
#include <string>
#include <vector>

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
  if (kind == cudaMemcpyDeviceToDevice) {
    // Queued on the engine's stream: the host has nothing to wait for (batch-norm eval copies
    // its running statistics this way every batch).
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, default_stream()));
    return;
  }
  // To or from the host: synchronous (on the legacy stream, which waits for the engine's).
  CHECK_CUDA(cudaMemcpy(dst, src, bytes, kind));
}

void memset_zero(void* dst, size_t bytes) { CHECK_CUDA(cudaMemset(dst, 0, bytes)); }

void synchronize() { CHECK_CUDA(cudaDeviceSynchronize()); }

namespace {
// The files the dynamic loader mapped for the CUDA libraries: which copy runs, whatever
// LD_LIBRARY_PATH or the build's search paths said.
std::string loaded_library_files() {
  std::vector<std::string> files;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string path = info->dlpi_name ? info->dlpi_name : "";
        const size_t slash = path.rfind('/');
        const std::string base = path.substr(slash == std::string::npos ? 0 : slash + 1);
        for (const char* stem : {"libcudart.so", "libcublasLt.so", "libcublas.so", "libcudnn", "libnccl.so"})
          if (base.rfind(stem, 0) == 0) {
            static_cast<std::vector<std::string>*>(out)->push_back(path);
            break;
          }
        return 0;
      },
      &files);
  std::string s;
  for (const std::string& f : files) s += "loaded file:  " + f + "\n";
  return s.empty() ? "loaded file:  none of libcudart/libcublasLt/libcudnn/libnccl is mapped (static runtime?)\n" : s;
}
}  // namespace

std::string library_versions() {
  // Versions as integers: CUDA 12080 = 12.8, cuBLASLt 130100 = 13.1.0, cuDNN 90800 = 9.8.0.
  std::ostringstream os;
  int rt = 0, drv = 0;
  const cudaError_t rst = cudaRuntimeGetVersion(&rt);
  const cudaError_t dst = cudaDriverGetVersion(&drv);
  os << "CUDA runtime: loaded " << (rst == cudaSuccess ? std::to_string(rt) : cudaGetErrorString(rst))
     << ", built with " << CUDART_VERSION << "\n";
  os << "CUDA driver:  supports " << (dst == cudaSuccess ? std::to_string(drv) : cudaGetErrorString(dst))
     << (dst == cudaSuccess && drv == 0 ? " (no driver)" : "") << "\n";
  os << "cuBLASLt:     loaded " << cublasLtGetVersion() << ", built with " << CUBLAS_VERSION << "\n";
  os << "cuDNN:        loaded " << cudnnGetVersion() << ", built with " << CUDNN_VERSION
     << (cudnnGetVersion() / 10000 != CUDNN_VERSION / 10000 ? " (MAJOR VERSION MISMATCH)" : "") << "\n";
  cudaGetLastError();  // leave no sticky error from the queries behind
  os << loaded_library_files();
  return os.str();
}

HostMirror::HostMirror() {
  void* p = nullptr;
  CHECK_CUDA(cudaMallocHost(&p, sizeof(int64_t)));
  host_ = static_cast<int64_t*>(p);
  *host_ = 0;
  cudaEvent_t ev = nullptr;
  CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  event_ = ev;
}

HostMirror::~HostMirror() {
  // Not checked: a destructor must not throw, and the process may be tearing the runtime down.
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (host_) cudaFreeHost(host_);
}

void HostMirror::post(const int64_t* device_value, cudaStream_t stream) {
  CHECK_CUDA(cudaMemcpyAsync(host_, device_value, sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(event_), stream));
  posted_ = true;
}

bool HostMirror::poll(int64_t* value) const {
  if (!posted_) return false;
  const cudaError_t st = cudaEventQuery(static_cast<cudaEvent_t>(event_));
  if (st == cudaErrorNotReady) {
    // "Not ready" is an answer, not an error: keep it from surfacing at the next launch check.
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  CHECK_CUDA(st);
  *value = *host_;
  return true;
}

}  // namespace kernels::cuda

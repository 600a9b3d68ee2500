// Thin, checked wrappers over the CUDA runtime that the engine needs without including
// CUDA headers itself: device discovery, copies, memset. Every call's status is checked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/context.h"

namespace kernels::cuda {

// Any runtime error (no driver, no device) counts as "no device", with its message in *why.
int device_count(std::string* why);
// Device to device: queued on the engine stream. To or from the host: synchronous.
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes);
void memset_zero(void* dst, size_t bytes);
void synchronize();
// Loaded vs built-with versions of the CUDA runtime, the driver, cuBLASLt and cuDNN, one line
// each, then the path of each CUDA library file actually loaded; never throws (a missing
// driver is reported in its line).
std::string library_versions();

// A device int64 watched from the host without waiting: post() queues an async copy into
// pinned host memory and records an event; poll() returns the copied value once the stream has
// passed that event (cudaEventQuery), and false while it has not. Post again only after a poll
// succeeded, so the event is not pushed ahead forever. For guards that may fire late, such as
// the loss scaler's consecutive-skip limit.
class HostMirror {
 public:
  HostMirror();
  ~HostMirror();
  HostMirror(const HostMirror&) = delete;
  HostMirror& operator=(const HostMirror&) = delete;
  void post(const int64_t* device_value, cudaStream_t stream);
  bool poll(int64_t* value) const;
  bool posted() const { return posted_; }

 private:
  int64_t* host_ = nullptr;  // pinned
  void* event_ = nullptr;    // cudaEvent_t
  bool posted_ = false;
};

}  // namespace kernels::cuda

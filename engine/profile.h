// Host wall time per CPU kernel, for a per-op table of a training step (bench_train --profile).
// Off by default, when a timer costs one load of a flag; on the GPU the host does not wait for
// kernels, so only CPU kernels are timed.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace engine {

void set_kernel_profiling(bool on);
bool kernel_profiling();

struct KernelTime {
  std::string name;  // the op's kernel name, as in its error messages ("conv2d backward filter")
  int64_t calls = 0;
  double seconds = 0;
};
// The totals since the previous call, largest first; starts counting afresh.
std::vector<KernelTime> take_kernel_profile();

void record_kernel_time(const char* name, double seconds);

// Times its scope under `name` when profiling is on (the ops wrap each CPU kernel call in one).
class KernelTimer {
 public:
  explicit KernelTimer(const char* name) : name_(kernel_profiling() ? name : nullptr) {
    if (name_) start_ = std::chrono::steady_clock::now();
  }
  ~KernelTimer() {
    if (name_)
      record_kernel_time(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace engine

// The CPU kernel profile: a flag, and totals by kernel name behind a mutex (kernels are timed
// from the calling thread only, so the lock is taken once per kernel call, when on).
#include "engine/profile.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>

namespace engine {
namespace {

std::atomic<bool> g_on{false};
std::mutex g_mu;
std::map<std::string, KernelTime>& totals() {
  static std::map<std::string, KernelTime> t;
  return t;
}

}  // namespace

void set_kernel_profiling(bool on) { g_on.store(on, std::memory_order_relaxed); }
bool kernel_profiling() { return g_on.load(std::memory_order_relaxed); }

void record_kernel_time(const char* name, double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  KernelTime& t = totals()[name];
  t.name = name;
  ++t.calls;
  t.seconds += seconds;
}

std::vector<KernelTime> take_kernel_profile() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<KernelTime> out;
  for (auto& [name, t] : totals()) out.push_back(t);
  totals().clear();
  std::sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace engine

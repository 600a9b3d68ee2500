// CPU allocator (64-byte aligned, counted by kind), memory statistics and the kind scope.
#include "engine/allocator.h"

#include <cstdlib>
#include <mutex>

#include "engine/device.h"
#include "engine/error.h"

namespace engine {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

const char* mem_kind_name(MemKind k) {
  switch (k) {
    case MemKind::Weights: return "weights";
    case MemKind::Gradients: return "gradients";
    case MemKind::OptimizerState: return "optimizer state";
    case MemKind::Activations: return "activations";
    case MemKind::Workspace: return "workspace";
    case MemKind::Data: return "data";
    case MemKind::Count: break;
  }
  return "?";
}

void MemoryStats::on_alloc(MemKind k, int64_t bytes) {
  const int i = static_cast<int>(k);
  current[i] += bytes;
  if (current[i] > peak[i]) peak[i] = current[i];
  total_current += bytes;
  if (total_current > total_peak) {
    total_peak = total_current;
    at_total_peak = current;
  }
}

void MemoryStats::on_free(MemKind k, int64_t bytes) {
  current[static_cast<int>(k)] -= bytes;
  total_current -= bytes;
}

void MemoryStats::reset_peak() {
  peak = current;
  total_peak = total_current;
  at_total_peak = current;
}

namespace {

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, MemKind kind) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = rounded ? std::aligned_alloc(64, rounded) : nullptr;
    ENGINE_CHECK(p || rounded == 0, "out of host memory: requested " << bytes << " bytes for "
                                        << mem_kind_name(kind));
    std::lock_guard<std::mutex> lock(mu_);
    stats_.on_alloc(kind, static_cast<int64_t>(bytes));
    return p;
  }
  void deallocate(void* p, size_t bytes, MemKind kind) override {
    std::free(p);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.on_free(kind, static_cast<int64_t>(bytes));
  }
  Device device() const override { return Device::cpu(); }

 private:
  std::mutex mu_;  // tensors may be freed from OpenMP worker threads
};

Allocator* g_cuda_allocator = nullptr;
thread_local MemKind t_mem_kind = MemKind::Activations;

}  // namespace

Allocator& allocator_for(Device d) {
  static CpuAllocator cpu;
  if (d.is_cpu()) return cpu;
  if (!g_cuda_allocator) register_cuda_backend();
  ENGINE_CHECK(g_cuda_allocator, "no CUDA backend in this build (device " << d.str() << ")");
  return *g_cuda_allocator;
}

void register_cuda_allocator(Allocator* a) { g_cuda_allocator = a; }

MemKind current_mem_kind() { return t_mem_kind; }
MemKindScope::MemKindScope(MemKind k) : saved_(t_mem_kind) { t_mem_kind = k; }
MemKindScope::~MemKindScope() { t_mem_kind = saved_; }

}  // namespace engine

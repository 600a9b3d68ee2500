// CPU allocator (64-byte aligned, counted by kind), memory statistics and the kind scope.
#include "engine/allocator.h"

#include <cstdlib>
#include <mutex>

#include "engine/device.h"
#include "engine/error.h"

namespace engine {


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

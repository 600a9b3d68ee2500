// CPU caching allocator (64-byte aligned, counted by kind), memory statistics and the kind scope.
#include "engine/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/device.h"
#include "engine/error.h"

namespace engine {


namespace {

// Caches freed blocks by their rounded size and hands them out again, as the CUDA caching
// allocator does: a training step allocates the same sizes every time, so from the second
// step on it takes no memory from the system and touches no fresh pages (a fresh page costs
// a page fault). The counts by kind are of live tensors, cached blocks excluded. The cache is
// bounded by the program's own high-water mark of live bytes (at least kMinCacheBound): past
// it, freed blocks go back to the system, so a program never holds more than twice its peak.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes, MemKind kind) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(rounded);
      if (it != cache_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        cached_bytes_ -= rounded;
      }
    }
    if (!p && rounded) p = std::aligned_alloc(64, rounded);
    if (!p && rounded) {
      release_cached();  // give the cache back and try once more
      p = std::aligned_alloc(64, rounded);
    }
    ENGINE_CHECK(p || rounded == 0, "out of host memory: requested " << bytes << " bytes for " << mem_kind_name(kind));
    std::lock_guard<std::mutex> lock(mu_);
    stats_.on_alloc(kind, static_cast<int64_t>(bytes));  // counted once it exists
    return p;
  }
  void deallocate(void* p, size_t bytes, MemKind kind) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    bool keep = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.on_free(kind, static_cast<int64_t>(bytes));
      const size_t bound = std::max<size_t>(kMinCacheBound, static_cast<size_t>(stats_.total_peak));
      if (p && cached_bytes_ + rounded <= bound) {
        cache_[rounded].push_back(p);
        cached_bytes_ += rounded;
        keep = true;
      }
    }
    if (!keep) std::free(p);
  }
  Device device() const override { return Device::cpu(); }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [size, blocks] : cache_)
      for (void* q : blocks) std::free(q);
    cache_.clear();
    cached_bytes_ = 0;
  }

 private:
  static constexpr size_t kMinCacheBound = size_t(256) << 20;  // 256 MiB
  std::mutex mu_;  // tensors may be freed from OpenMP worker threads
  std::unordered_map<size_t, std::vector<void*>> cache_;
  size_t cached_bytes_ = 0;
};

Allocator* g_cuda_allocator = nullptr;
thread_local MemKind t_mem_kind = MemKind::Activations;

}  // namespace

Allocator& allocator_for(Device d) {
  // Never destroyed: a tensor freed late in program exit (a static, a thread_local) must still
  // find its allocator.
  static CpuAllocator* cpu = new CpuAllocator;
  if (d.is_cpu()) return *cpu;
  if (!g_cuda_allocator) register_cuda_backend();
  ENGINE_CHECK(g_cuda_allocator, "no CUDA backend in this build (device " << d.str() << ")");
  return *g_cuda_allocator;
}

void register_cuda_allocator(Allocator* a) { g_cuda_allocator = a; }

MemKind current_mem_kind() { return t_mem_kind; }
MemKindScope::MemKindScope(MemKind k) : saved_(t_mem_kind) { t_mem_kind = k; }
MemKindScope::~MemKindScope() { t_mem_kind = saved_; }

}  // namespace engine

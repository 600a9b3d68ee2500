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

Allocator* g_cuda_allocator = nullptr;
thread_local MemKind t_mem_kind = MemKind::Activations;

}  // namespace

// Caches freed blocks by their rounded size and hands them out again, as the CUDA caching
// allocator does: a training step allocates the same sizes every time, so from the second
// step on it takes no memory from the system and touches no fresh pages (a fresh page costs
// a page fault). The counts by kind are of live tensors, cached blocks excluded. The cache is
// bounded by twice the program's own high-water mark of live bytes (or min_cache_bound, if
// more): a step's blocks add up to more than its peak, since temporaries freed before the
// peak stay cached while the peak's blocks are live. Past the bound, the sizes unused for
// longest go back to the system first, so a long-lived program keeps caching the shapes it
// uses now.
CpuCachingAllocator::CpuCachingAllocator(size_t min_cache_bound) : min_cache_bound_(min_cache_bound) {}

void* CpuCachingAllocator::allocate(size_t bytes, MemKind kind) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(rounded);
    if (it != cache_.end() && !it->second.blocks.empty()) {
      p = it->second.blocks.back();
      it->second.blocks.pop_back();
      it->second.last_use = ++clock_;
      cached_bytes_ -= rounded;
    }
  }
  const bool fresh = !p && rounded;
  if (fresh) p = std::aligned_alloc(64, rounded);
  if (!p && rounded) {
    release_cached();  // give the cache back and try once more
    p = std::aligned_alloc(64, rounded);
  }
  ENGINE_CHECK(p || rounded == 0, "out of host memory: requested " << bytes << " bytes for " << mem_kind_name(kind));
  std::lock_guard<std::mutex> lock(mu_);
  stats_.on_alloc(kind, static_cast<int64_t>(bytes));  // counted once it exists
  if (fresh) ++stats_.system_allocations;
  return p;
}

void CpuCachingAllocator::deallocate(void* p, size_t bytes, MemKind kind) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  std::vector<void*> evicted;
  bool keep = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.on_free(kind, static_cast<int64_t>(bytes));
    const size_t bound = std::max<size_t>(min_cache_bound_, 2 * static_cast<size_t>(stats_.total_peak));
    // Over the bound, the sizes unused for longest go first: shapes from earlier work (a
    // previous model, a test before) must not crowd out the current step's.
    while (p && rounded <= bound && cached_bytes_ + rounded > bound) {
      auto oldest = cache_.end();
      for (auto it = cache_.begin(); it != cache_.end(); ++it)
        if (it->first != rounded && !it->second.blocks.empty() &&
            (oldest == cache_.end() || it->second.last_use < oldest->second.last_use))
          oldest = it;
      if (oldest == cache_.end()) break;
      for (void* q : oldest->second.blocks) evicted.push_back(q);
      cached_bytes_ -= oldest->first * oldest->second.blocks.size();
      oldest->second.blocks.clear();
    }
    if (p && cached_bytes_ + rounded <= bound) {
      Bucket& b = cache_[rounded];
      b.blocks.push_back(p);
      b.last_use = ++clock_;
      cached_bytes_ += rounded;
      keep = true;
    }
  }
  for (void* q : evicted) std::free(q);
  if (!keep) std::free(p);
}

void CpuCachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, bucket] : cache_)
    for (void* q : bucket.blocks) std::free(q);
  cache_.clear();
  cached_bytes_ = 0;
}

size_t CpuCachingAllocator::cached_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_bytes_;
}

Allocator& allocator_for(Device d) {
  // Never destroyed: a tensor freed late in program exit (a static, a thread_local) must still
  // find its allocator.
  static CpuCachingAllocator* cpu = new CpuCachingAllocator;
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

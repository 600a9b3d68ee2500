// The engine's side of memory: devices, kinds and the allocator interface (kernels/memory.h,
// since the CUDA caching allocator implements it), the allocator of each device, and the
// scope that sets the kind of new tensors. The CPU allocator is implemented in allocator.cpp.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kernels/memory.h"

namespace engine {

using kernels::Allocator;
using kernels::Device;
using kernels::DeviceType;
using kernels::kNumMemKinds;
using kernels::mem_kind_name;
using kernels::MemKind;
using kernels::MemoryStats;

// The allocator that owns memory on `d` (the CUDA one is registered by the CUDA backend).
Allocator& allocator_for(Device d);
void register_cuda_allocator(Allocator* a);

// The CPU's allocator: freed blocks are cached by size and handed out again (allocator.cpp).
// The cache may hold min_cache_bound bytes, or up to twice the peak of live bytes when that is
// more.
class CpuCachingAllocator final : public Allocator {
 public:
  explicit CpuCachingAllocator(size_t min_cache_bound = size_t(256) << 20);
  void* allocate(size_t bytes, MemKind kind) override;
  void deallocate(void* p, size_t bytes, MemKind kind) override;
  Device device() const override { return Device::cpu(); }
  void release_cached();  // every cached block back to the system
  size_t cached_bytes();  // bytes of free blocks held for reuse

 private:
  struct Bucket {
    std::vector<void*> blocks;  // free blocks of one rounded size
    uint64_t last_use = 0;      // clock_ when a block of this size was last freed or reused
  };
  const size_t min_cache_bound_;
  std::mutex mu_;  // tensors may be freed from OpenMP worker threads
  std::unordered_map<size_t, Bucket> cache_;
  size_t cached_bytes_ = 0;
  uint64_t clock_ = 0;
};

// Tensors created without an explicit kind get the kind of the innermost scope
// (Activations by default); the optimizer opens OptimizerState, parameters Weights.
MemKind current_mem_kind();
class MemKindScope {
 public:
  explicit MemKindScope(MemKind k);
  ~MemKindScope();
  MemKindScope(const MemKindScope&) = delete;
  MemKindScope& operator=(const MemKindScope&) = delete;

 private:
  MemKind saved_;
};

}  // namespace engine

// The caching device allocator behind every CUDA tensor and workspace.
//
// Blocks come from cudaMalloc and are never split. A request is rounded up to its size
// class; a freed block goes onto its class's free list and serves the next request of the
// same class, so a training step that repeats the shapes of the last one makes no
// cudaMalloc/cudaFree calls at all (they synchronise the device and cost ~100 us each).
//   classes: up to 1 MiB, multiples of 512 B; above, 8 classes per power of two
//            (2^k * (1 + j/8)), so rounding wastes at most 12.5% of a large block.
// Statistics (current/peak by MemKind) count the *requested* bytes, as the CPU allocator
// does, so the per-kind breakdown means the same on both devices; reserved_bytes() says
// what the cache holds from the driver on top.
// Out of memory: the cache is emptied and the cudaMalloc retried once; if it still fails,
// an kernels::Error says what was asked for and what is in use, by kind.
// Stream order: all engine work runs on context().stream (or the legacy stream, which syncs
// with it), so a block freed by the host can be handed out again at once: any kernel that
// still uses it was queued earlier on the same stream. Work on other streams must not
// hold blocks across a free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/memory.h"

namespace kernels::cuda {

class CachingAllocator final : public kernels::Allocator {
 public:
  explicit CachingAllocator(int device);
  ~CachingAllocator() override;  // leaves device memory to the driver (see the .cu)

  void* allocate(size_t bytes, kernels::MemKind kind) override;
  void deallocate(void* p, size_t bytes, kernels::MemKind kind) override;
  kernels::Device device() const override { return kernels::Device::cuda(device_); }

  void empty_cache();               // cudaFree every cached (free) block
  int64_t malloc_count() const;     // successful cudaMalloc calls so far
  int64_t free_count() const;       // cudaFree calls so far
  int64_t cached_bytes() const;     // in free lists (class sizes)
  int64_t reserved_bytes() const;   // held from the driver: in use + cached (class sizes)
  // One line: "in use: weights 1.0 MiB, ...; cached 2.0 MiB; reserved 3.0 MiB".
  std::string describe() const;

  static size_t round_size(size_t bytes);  // the size class of a request

 private:
  void* malloc_with_retry(size_t rounded, size_t requested, kernels::MemKind kind);
  void free_cached_blocks();  // returns cached blocks to the driver; the caller holds mu_
  std::string in_use_by_kind_locked() const;

  int device_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // class size -> cached blocks
  std::unordered_map<void*, size_t> live_;               // block -> class size
  int64_t mallocs_ = 0, frees_ = 0, cached_ = 0, reserved_ = 0;
};

// The allocator of the current device at first call (one device for now).
CachingAllocator& cuda_allocator();

// A scratch buffer from the caching allocator, counted as MemKind::Workspace, released
// (to the cache, stream-ordered) when it goes out of scope.
class Workspace {
 public:
  explicit Workspace(size_t bytes, kernels::MemKind kind = kernels::MemKind::Workspace);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return p_; }
  template <class T> T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  kernels::MemKind kind_;
};

}  // namespace kernels::cuda

// Caching device allocator: size classes over cudaMalloc, per-kind statistics, clear OOM.
#include "kernels/cuda/allocator.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <sstream>

#include "kernels/cuda/check.h"

namespace kernels::cuda {

namespace {
constexpr size_t kSmallLimit = size_t(1) << 20;  // 1 MiB
constexpr size_t kSmallStep = 512;

std::string mib(double bytes) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << bytes / (1024.0 * 1024.0) << " MiB";
  return os.str();
}
}  // namespace

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes <= kSmallLimit) return (bytes + kSmallStep - 1) / kSmallStep * kSmallStep;
  size_t p = kSmallLimit;
  while (p <= bytes / 2) p *= 2;  // largest power of two <= bytes (p >= 1 MiB)
  const size_t step = p / 8;
  return (bytes + step - 1) / step * step;
}

CachingAllocator::CachingAllocator(int device) : device_(device) {}

// Process exit: the driver reclaims everything; calling cudaFree from a static destructor,
// possibly after the runtime shut down, would only risk a crash at exit.
CachingAllocator::~CachingAllocator() = default;

void* CachingAllocator::malloc_with_retry(size_t rounded, size_t requested, kernels::MemKind kind) {
  void* p = nullptr;
  cudaError_t st = cudaMalloc(&p, rounded);
  if (st == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an OOM is not sticky, but clear it so CHECK_LAUNCH does not see it
    // Give the cache back to the driver and try once more.
    const int64_t cached_before = cached_;
    free_cached_blocks();
    p = nullptr;
    st = cudaMalloc(&p, rounded);
    if (st == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::ostringstream os;
      os << "CUDA out of memory: requested " << mib(static_cast<double>(requested)) << " for "
         << kernels::mem_kind_name(kind) << "; " << in_use_by_kind_locked() << "; cached "
         << mib(static_cast<double>(cached_before)) << " (released to the driver before a retry)";
      size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
        os << "; device free " << mib(static_cast<double>(free_b)) << " of " << mib(static_cast<double>(total_b));
      else
        cudaGetLastError();
      ENGINE_FAIL(os.str());
    }
  }
  if (st != cudaSuccess) {
    ::kernels::throw_error(std::string("cudaMalloc(") + std::to_string(rounded) + " bytes) failed: " +
                              cudaGetErrorString(st),
                          __FILE__, __LINE__);
  }
  ++mallocs_;
  ++stats_.system_allocations;
  reserved_ += static_cast<int64_t>(rounded);
  return p;
}

void* CachingAllocator::allocate(size_t bytes, kernels::MemKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes == 0) {
    stats_.on_alloc(kind, 0);
    return nullptr;
  }
  const size_t rounded = round_size(bytes);
  void* p = nullptr;
  auto it = free_.find(rounded);
  if (it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    cached_ -= static_cast<int64_t>(rounded);
  } else {
    p = malloc_with_retry(rounded, bytes, kind);
  }
  live_.emplace(p, rounded);
  stats_.on_alloc(kind, static_cast<int64_t>(bytes));
  return p;
}

void CachingAllocator::deallocate(void* p, size_t bytes, kernels::MemKind kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!p) {
    stats_.on_free(kind, 0);
    return;
  }
  auto it = live_.find(p);
  if (it == live_.end()) {
    // Called from destructors: report instead of throwing (which would terminate).
    std::fprintf(stderr, "engine: CUDA allocator asked to free %p, which it did not allocate (ignored)\n", p);
    return;
  }
  const size_t rounded = it->second;
  live_.erase(it);
  free_[rounded].push_back(p);
  cached_ += static_cast<int64_t>(rounded);
  stats_.on_free(kind, static_cast<int64_t>(bytes));
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  free_cached_blocks();
}

// Returns every cached block to the driver (the caller holds mu_).
void CachingAllocator::free_cached_blocks() {
  for (auto& kv : free_) {
    for (void* b : kv.second) {
      CHECK_CUDA(cudaFree(b));
      ++frees_;
      reserved_ -= static_cast<int64_t>(kv.first);
    }
  }
  free_.clear();
  cached_ = 0;
}

int64_t CachingAllocator::malloc_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mallocs_;
}
int64_t CachingAllocator::free_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return frees_;
}
int64_t CachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}
int64_t CachingAllocator::reserved_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

std::string CachingAllocator::in_use_by_kind_locked() const {
  std::ostringstream os;
  os << "in use:";
  for (int k = 0; k < kernels::kNumMemKinds; ++k) {
    os << (k ? ", " : " ") << kernels::mem_kind_name(static_cast<kernels::MemKind>(k)) << " "
       << mib(static_cast<double>(stats_.current[k]));
  }
  return os.str();
}

std::string CachingAllocator::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_by_kind_locked() + "; cached " + mib(static_cast<double>(cached_)) + "; reserved " +
         mib(static_cast<double>(reserved_));
}

CachingAllocator& cuda_allocator() {
  static CachingAllocator* a = [] {
    int dev = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    return new CachingAllocator(dev);  // never deleted, like the contexts
  }();
  return *a;
}

Workspace::Workspace(size_t bytes, kernels::MemKind kind) : bytes_(bytes), kind_(kind) {
  if (bytes) p_ = cuda_allocator().allocate(bytes, kind);
}
Workspace::~Workspace() {
  if (p_) cuda_allocator().deallocate(p_, bytes_, kind_);
}

}  // namespace kernels::cuda

// Devices, memory kinds and the allocator interface that counts current and peak bytes by
// kind: at the bottom (kernels/) because the CUDA caching allocator implements it; the engine
// uses them under its own names (engine/allocator.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace kernels {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index); }
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
};

// What a block of memory is for; the trainer prints peak bytes per kind, which is how
// we show what mixed precision saves.
enum class MemKind : uint8_t { Weights, Gradients, OptimizerState, Activations, Workspace, Data, Count };
constexpr int kNumMemKinds = static_cast<int>(MemKind::Count);
inline const char* mem_kind_name(MemKind k) {
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

struct MemoryStats {
  std::array<int64_t, kNumMemKinds> current{};
  std::array<int64_t, kNumMemKinds> peak{};   // each kind's own high-water mark
  int64_t total_current = 0;
  int64_t total_peak = 0;
  std::array<int64_t, kNumMemKinds> at_total_peak{};  // the breakdown when the total peaked
  int64_t live_blocks = 0;         // tensors' blocks handed out and not yet given back
  int64_t system_allocations = 0;  // blocks taken from the system (cache misses): flat in a steady state

  void on_alloc(MemKind k, int64_t bytes) {
    const int i = static_cast<int>(k);
    current[i] += bytes;
    if (current[i] > peak[i]) peak[i] = current[i];
    total_current += bytes;
    ++live_blocks;
    if (total_current > total_peak) {
      total_peak = total_current;
      at_total_peak = current;
    }
  }
  void on_free(MemKind k, int64_t bytes) {
    current[static_cast<int>(k)] -= bytes;
    total_current -= bytes;
    --live_blocks;
  }
  void reset_peak() {
    peak = current;
    total_peak = total_current;
    at_total_peak = current;
  }
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes, MemKind kind) = 0;
  virtual void deallocate(void* p, size_t bytes, MemKind kind) = 0;
  virtual Device device() const = 0;
  const MemoryStats& stats() const { return stats_; }
  void reset_peak() { stats_.reset_peak(); }

 protected:
  MemoryStats stats_;
};

}  // namespace kernels

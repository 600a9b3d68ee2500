// Device, memory kinds and the allocator interface that counts current and peak bytes
// by kind. The CPU allocator lives here; the CUDA caching allocator implements the same.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace engine {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
  static Device cpu() { return {}; }
  static Device cuda(int i = 0) { return {DeviceType::CUDA, i}; }
};

// What a block of memory is for; the trainer prints peak bytes per kind, which is how
// we show what mixed precision saves.
enum class MemKind : uint8_t { Weights, Gradients, OptimizerState, Activations, Workspace, Data, Count };
constexpr int kNumMemKinds = static_cast<int>(MemKind::Count);
const char* mem_kind_name(MemKind k);

struct MemoryStats {
  std::array<int64_t, kNumMemKinds> current{};
  std::array<int64_t, kNumMemKinds> peak{};   // each kind's own high-water mark
  int64_t total_current = 0;
  int64_t total_peak = 0;
  std::array<int64_t, kNumMemKinds> at_total_peak{};  // the breakdown when the total peaked

  void on_alloc(MemKind k, int64_t bytes);
  void on_free(MemKind k, int64_t bytes);
  void reset_peak();
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

// The allocator that owns memory on `d` (the CUDA one is registered by the CUDA backend).
Allocator& allocator_for(Device d);
void register_cuda_allocator(Allocator* a);

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

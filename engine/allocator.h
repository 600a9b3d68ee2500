// The engine's side of memory: devices, kinds and the allocator interface (kernels/memory.h,
// since the CUDA caching allocator implements it), the allocator of each device, and the
// scope that sets the kind of new tensors. The CPU allocator lives in allocator.cpp.
#pragma once

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

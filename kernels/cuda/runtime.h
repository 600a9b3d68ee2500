// Thin, checked wrappers over the CUDA runtime that the engine needs without including
// CUDA headers itself: device discovery, copies, memset. Every call's status is checked.
#pragma once

#include <cstddef>
#include <string>

namespace kernels::cuda {

// Any runtime error (no driver, no device) counts as "no device", with its message in *why.
int device_count(std::string* why);
void copy(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes);
void memset_zero(void* dst, size_t bytes);
void synchronize();

}  // namespace kernels::cuda

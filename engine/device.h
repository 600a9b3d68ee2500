// Which devices exist and the raw copies between them. Without a CUDA build (or without
// a GPU) the CUDA functions say why instead of crashing.
#pragma once

#include <cstddef>
#include <string>

#include "engine/allocator.h"
#include "engine/dtype.h"

namespace engine {

bool cuda_built();                        // compiled with the CUDA backend
int cuda_device_count(std::string* why);  // 0 with the reason when there is none
// "auto" -> cuda:0 when a device is present, else cpu; "cpu"; "cuda" or "cuda:N".
Device parse_device(const std::string& spec);

// CUDA: only deterministic cuDNN algorithms, so a run repeats bit for bit (a no-op on the CPU,
// which is deterministic already).
void set_cuda_deterministic(bool on);
// One line per library: the version the binary loaded at run time next to the one its headers
// were built with (CUDA runtime and driver, cuBLASLt, cuDNN), or why there is none.
std::string cuda_library_versions();

// Registers the CUDA caching allocator with the engine (once; a no-op without CUDA).
void register_cuda_backend();

void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
void device_memset_zero(void* dst, Device dev, size_t bytes);
// Fills n floating elements of dtype t on a CUDA device with one kernel (no host wait);
// returns false for dtypes it does not handle (the caller then copies from the host).
bool device_fill(void* dst, Device dev, DType t, double value, int64_t n);

}  // namespace engine

// CUDA twin of kernels/cpu/augment.h: builds a batch from the device-resident uint8 data set
// (gather by index, crop/flip from the shared Philox draws, normalise, write in T), so a
// training step never waits for the host. (The loss scaler's kernels are in scaler.h.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/augment_math.h"

namespace kernels::cuda {

template <class T>
void make_batch(const uint8_t* images, const int32_t* labels, const int32_t* indices, int64_t batch, int h, int w,
                int c, bool augment, const AugmentConfig& cfg, uint64_t seed, uint64_t epoch, T* out,
                int32_t* labels_out, cudaStream_t stream);

}  // namespace kernels::cuda

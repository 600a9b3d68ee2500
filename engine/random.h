// The engine's seeded random numbers for initialisation and test data: Philox draws from
// (seed, stream, counter), so a run is reproducible from its seed alone.
#pragma once

#include <cstdint>

#include "engine/tensor.h"

namespace engine {

// Like torch.manual_seed: resets the generator used by parameter initialisation.
void manual_seed(uint64_t seed);
uint64_t next_seed();  // a fresh 64-bit seed from the generator (for dropout layers etc.)
double uniform01();    // next draw in [0, 1)

// Where this process's batch starts in the global batch, in samples (0 in one process): a
// data-parallel rank's shard sets it, and per-sample draws (dropout masks) are keyed by the
// global position, so the ranks together draw exactly what one process would.
void set_batch_offset(int64_t samples);
int64_t batch_offset();

// CPU tensors of the given dtype filled from the generator.
Tensor uniform(const Shape& shape, double lo, double hi, DType dtype);
Tensor normal(const Shape& shape, double mean, double stddev, DType dtype);

}  // namespace engine

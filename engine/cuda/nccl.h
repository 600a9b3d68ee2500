// The GPU side of data-parallel training (engine/distributed.h): one NCCL communicator per
// process, a communication stream beside the engine's compute stream, and the events that
// order the two. Built when the CUDA backend finds NCCL (ENGINE_WITH_NCCL).
#pragma once

#include <cstdint>
#include <string>

#include "engine/dtype.h"

namespace engine::dist::nccl {

constexpr size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

// Rank 0 makes the id; every rank receives it (over MPI) and joins the communicator of
// `size` ranks on CUDA device `device`. Errors name the NCCL call and its message.
void make_unique_id(char (&id)[kUniqueIdBytes]);
void init(const char (&id)[kUniqueIdBytes], int rank, int size, int device);
bool initialized();
void finalize();

// Sum across ranks in place, in compute-stream order (sync-BN statistics: the next kernel needs
// the result). It runs on the communication stream, after any gradient buckets queued there.
void all_reduce_on_compute_stream(void* data, int64_t n, DType t);
// Sum across ranks in place on the communication stream, after everything queued so far on
// the compute stream (a gradient bucket, while backward goes on).
void all_reduce_on_comm_stream(void* data, int64_t n, DType t);
// The compute stream waits for everything queued on the communication stream (before the
// optimizer reads the gradients). No host wait.
void join_comm_stream();

}  // namespace engine::dist::nccl

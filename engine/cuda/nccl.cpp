// NCCL for data-parallel training on GPUs: the communicator, the communication stream and the
// events that order it against the engine's compute stream (engine/cuda/nccl.h).
#include "engine/cuda/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "engine/error.h"
#include "kernels/cuda/context.h"

namespace engine::dist::nccl {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes, "NCCL's unique id size changed");

namespace {

#define NCCL_CHECK(call)                                                                               \
  do {                                                                                                 \
    const ncclResult_t r_ = (call);                                                                    \
    ENGINE_CHECK(r_ == ncclSuccess, #call << " failed: " << ncclGetErrorString(r_) << last_error());   \
  } while (0)
#define CUDA_CHECK_NCCL(call)                                                                          \
  do {                                                                                                 \
    const cudaError_t e_ = (call);                                                                     \
    ENGINE_CHECK(e_ == cudaSuccess, #call << " failed: " << cudaGetErrorString(e_));                   \
  } while (0)

// NCCL's own detail, where the library has it (2.13 and later).
std::string last_error() {
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* e = ncclGetLastError(nullptr);
  return e && *e ? std::string(" (") + e + ")" : std::string();
#else
  return {};
#endif
}

struct State {
  ncclComm_t comm = nullptr;
  cudaStream_t comm_stream = nullptr;
  cudaEvent_t compute_done = nullptr, comm_done = nullptr;  // reused: recorded anew each time
};
State g;

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::F64: return ncclFloat64;
    default: ENGINE_FAIL("NCCL all-reduce: " << dtype_name(t) << " is not a floating dtype");
  }
}

void all_reduce(void* data, int64_t n, DType t, cudaStream_t s) {
  ENGINE_CHECK(g.comm, "NCCL all-reduce before nccl::init");
  NCCL_CHECK(ncclAllReduce(data, data, static_cast<size_t>(n), nccl_type(t), ncclSum, g.comm, s));
}

}  // namespace

void make_unique_id(char (&id)[kUniqueIdBytes]) {
  ncclUniqueId u;
  NCCL_CHECK(ncclGetUniqueId(&u));
  std::memcpy(id, &u, kUniqueIdBytes);
}

void init(const char (&id)[kUniqueIdBytes], int rank, int size, int device) {
  ENGINE_CHECK(!g.comm, "nccl::init called twice");
  CUDA_CHECK_NCCL(cudaSetDevice(device));
  ncclUniqueId u;
  std::memcpy(&u, id, kUniqueIdBytes);
  NCCL_CHECK(ncclCommInitRank(&g.comm, size, u, rank));
  CUDA_CHECK_NCCL(cudaStreamCreateWithFlags(&g.comm_stream, cudaStreamNonBlocking));
  CUDA_CHECK_NCCL(cudaEventCreateWithFlags(&g.compute_done, cudaEventDisableTiming));
  CUDA_CHECK_NCCL(cudaEventCreateWithFlags(&g.comm_done, cudaEventDisableTiming));
}

bool initialized() { return g.comm != nullptr; }

void finalize() {
  if (!g.comm) return;
  cudaStreamSynchronize(g.comm_stream);
  ncclCommDestroy(g.comm);
  cudaEventDestroy(g.compute_done);
  cudaEventDestroy(g.comm_done);
  cudaStreamDestroy(g.comm_stream);
  g = State{};
}

void all_reduce_on_comm_stream(void* data, int64_t n, DType t) {
  ENGINE_CHECK(g.comm, "NCCL all-reduce before nccl::init");
  // The bucket's gradients were written by kernels queued on the compute stream.
  CUDA_CHECK_NCCL(cudaEventRecord(g.compute_done, kernels::cuda::default_stream()));
  CUDA_CHECK_NCCL(cudaStreamWaitEvent(g.comm_stream, g.compute_done, 0));
  all_reduce(data, n, t, g.comm_stream);
}

void join_comm_stream() {
  ENGINE_CHECK(g.comm, "NCCL join before nccl::init");
  CUDA_CHECK_NCCL(cudaEventRecord(g.comm_done, g.comm_stream));
  CUDA_CHECK_NCCL(cudaStreamWaitEvent(kernels::cuda::default_stream(), g.comm_done, 0));
}

// Through the communication stream as well: one communicator's operations must be issued on one
// stream in one order (NCCL runs them in order; two streams could interleave them differently
// on different ranks), so the compute stream hands over and waits for the result.
void all_reduce_on_compute_stream(void* data, int64_t n, DType t) {
  all_reduce_on_comm_stream(data, n, t);
  join_comm_stream();
}

}  // namespace engine::dist::nccl

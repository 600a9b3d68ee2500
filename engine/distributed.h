// Data-parallel training across processes, PyTorch DDP's semantics: MPI launches the
// processes (one per device) and sums CPU gradients; NCCL, its unique id broadcast over MPI,
// sums GPU gradients on a second stream. Without MPI in the build, or in one process, the
// world has one rank and every call here is a no-op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn.h"
#include "engine/tape.h"

namespace engine::dist {

struct World {
  int rank = 0, size = 1;              // this process among all of the job's
  int local_rank = 0, local_size = 1;  // among those on this machine (picks the GPU)
};

// Joins the job mpirun started (MPI_Init); a world of one when the build has no MPI or the
// process was not launched by an MPI launcher. Call once, first thing in main.
const World& init(int* argc, char*** argv);
const World& world();
inline bool distributed() { return world().size > 1; }
bool mpi_built();
// GPU runs: the NCCL communicator of all ranks (rank 0's unique id broadcast over MPI), each
// on `device`. An error when the build has no NCCL. In one process it makes a communicator of
// one rank, whose collectives run (as identities): the GPU tests use that.
void init_nccl(Device device);
// Whether an NCCL communicator exists: CUDA gradients and sync-BN statistics then go through it.
bool nccl_active();
// Leaves the job (MPI_Finalize) after a clean run.
void finalize();

// Seconds any one collective may wait for the other ranks before the job ends with an error
// naming this rank and the collective (a rank that died or hangs; default 300).
void set_timeout(double seconds);
// Ends the whole job: "error: rank R of N: message" on this rank's stderr, then MPI_Abort, so
// mpirun stops every rank and exits non-zero. In one process: the line and exit(code).
[[noreturn]] void abort_job(const std::string& message, int code = 1);
// On ranks other than 0, sends stdout and stderr to /dev/null: rank 0 alone prints and logs.
// abort_job still reaches the terminal (it writes to a copy of the original stderr).
void quiet_other_ranks();

// Blocking collectives over MPI (host memory), each bounded by the timeout; `what` names it in
// the timeout error. timeout_scale stretches the limit for waits known to be long.
void barrier(const char* what, double timeout_scale = 1.0);
void broadcast_bytes(void* data, size_t bytes, int root, const char* what);
void all_reduce_sum(double* values, size_t n, const char* what);
// In-place sum across ranks of a tensor in FP32, FP64, FP16 or BF16 (16-bit sums are taken in
// FP32 and rounded once per step of MPI's reduction tree). CPU tensors over MPI; CUDA tensors
// over NCCL on the engine's stream (no host wait).
void all_reduce_sum(Tensor& t, const char* what);

// A stop request (a signal that reached some ranks) turned into one decision every rank takes
// at the same step, with no host wait of its own: vote() starts this step's non-blocking
// all-reduce (MAX) of the local request and returns the result of the previous step's vote,
// finished long ago behind a step of compute and gradient all-reduces. So every rank gets the
// same answer from the same call, one step after the earliest request. In one process: the
// request itself, at once. A request is a positive number (the trainer's: the signal's).
class StopVote {
 public:
  StopVote();
  ~StopVote();
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // Once per step, at the same point on every rank: 0, or the largest request of any rank.
  // After it returns non-zero, no vote is pending.
  int vote(int request_here);
  // Where ranks already wait for each other (the end of an epoch): the pending vote and this
  // one, blocking: the largest request any rank has made by now, or 0.
  int vote_now(int request_here);

 private:
  int finish_pending();  // the pending vote's result (0 when none)
  int request_ = 0, result_ = 0;
  bool pending_ = false;
  // The pending vote's MPI_Request, kept here (no allocation per step; no MPI types in this header).
  alignas(16) unsigned char mpi_request_[16] = {};
};

// DDP's start: rank 0's weights, buffers and module state (dropout seeds) to every rank. Also
// checks that every rank now holds the same bits (a checksum compared across ranks).
void broadcast_module(Module& m);
// A checksum of every tensor and string in the module's state dict: equal on every rank after
// broadcast_module and after each identical optimizer step.
uint64_t module_checksum(const Module& m);
// Rank 0's module extra state (batch-norm running statistics) to every rank: before evaluating
// or saving, as DDP's broadcast_buffers leaves rank 0's statistics in charge.
void broadcast_buffers(Module& m);

// Whether batch-norm layers in training mode average their batch statistics across ranks
// (--sync-bn): engine/ops_norm.cpp reads it.
void set_sync_batch_norm(bool on);
bool sync_batch_norm();

// Averages gradients across ranks during backward, in buckets: each parameter's gradient is a
// view into one flat bucket of its dtype; buckets follow the reverse of the parameters' order
// (the order backward finishes them); a bucket's all-reduce starts as soon as its last
// gradient is final (Tape::on_grad_ready), in bucket order on every rank, so it overlaps the
// rest of backward. The sum is the mean because each rank seeds its backward with its share
// of the global batch (shard / batch): see the trainer's train_step.
class GradReducer {
 public:
  // Bucket caps in bytes: the first (last layers, finished first) small so communication
  // starts early, the rest larger so there are few calls (PyTorch: 1 MiB and 25 MiB).
  GradReducer(std::vector<ParamPtr> params, size_t bucket_bytes = 25u << 20, size_t first_bucket_bytes = 1u << 20);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before tape.backward: hooks the tape and rearms every bucket.
  void attach(Tape& tape);
  // After tape.backward: starts the buckets not yet started (parameters the step did not
  // reach) and waits for all: on the CPU for the MPI requests, on a GPU by ordering the
  // compute stream after the communication stream (no host wait).
  void finish();

  struct BucketInfo { DType dtype; int64_t elements; size_t params; };
  std::vector<BucketInfo> buckets() const;
  int64_t bytes_per_step() const;  // what each rank sends into the all-reduce per step
  // How many buckets the last step started while backward was still running (the overlap).
  size_t started_during_backward() const { return started_early_; }

 private:
  struct Bucket;
  void ready(const Tensor& leaf);
  void launch_in_order();
  void start(Bucket& b);

  std::vector<ParamPtr> params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::pair<const TensorImpl*, size_t>> bucket_of_;  // gradient-holding tensor -> bucket
  size_t next_to_start_ = 0;
  size_t started_early_ = 0;
  bool on_cuda_ = false;
};

}  // namespace engine::dist

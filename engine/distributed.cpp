// Data-parallel training across processes: the MPI world, bounded collectives, weight
// broadcast, and the bucketed gradient all-reduce that overlaps backward (engine/distributed.h).
#include "engine/distributed.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <unordered_map>

#include "engine/checkpoint.h"
#include "engine/error.h"
#include "kernels/numeric.h"

#ifdef ENGINE_WITH_MPI
#include <mpi.h>
#endif
#ifdef ENGINE_WITH_NCCL
#include "engine/cuda/nccl.h"
#endif

namespace engine::dist {

namespace {

World g_world;
double g_timeout = 300;   // seconds per collective
int g_stderr_copy = 2;    // where abort_job writes (the original stderr on quiet ranks)
bool g_sync_bn = false;

#ifdef ENGINE_WITH_MPI
bool g_mpi_on = false;  // MPI_Init was called (launched by an MPI launcher)

[[noreturn]] void fail_collective(const char* what, double waited) {
  char msg[256];
  std::snprintf(msg, sizeof msg,
                "collective '%s' timed out after %.0f s waiting for the other ranks (one failed, hangs or "
                "was killed; raise the limit with --timeout)",
                what, waited);
  abort_job(msg);
}

// MPI has no 16-bit float type: FP16 and BF16 travel as 16-bit words and these ops add them
// in FP32, rounding once per pair (a reduction step of MPI's tree).
template <class T>
void sum_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = T(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}
MPI_Op g_sum_f16 = MPI_OP_NULL, g_sum_bf16 = MPI_OP_NULL;

void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  abort_job(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(len)));
}

struct MpiSum { MPI_Datatype type; MPI_Op op; };
MpiSum mpi_sum(DType t) {
  switch (t) {
    case DType::F32: return {MPI_FLOAT, MPI_SUM};
    case DType::F64: return {MPI_DOUBLE, MPI_SUM};
    case DType::F16: return {MPI_UINT16_T, g_sum_f16};
    case DType::BF16: return {MPI_UINT16_T, g_sum_bf16};
    default: ENGINE_FAIL("all-reduce: " << dtype_name(t) << " is not a floating dtype");
  }
}

int checked_count(int64_t n, const char* what) {
  ENGINE_CHECK(n <= INT_MAX, what << ": " << n << " elements is more than one MPI call takes");
  return static_cast<int>(n);
}

// Polls the request until done; past the timeout, ends the job naming the collective.
// Polling (not MPI_Wait) is what lets a stuck collective time out at all.
void wait(MPI_Request& req, const char* what, double timeout_scale = 1.0) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    int done = 0;
    mpi_check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(50));  // long waits: give the core away
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > g_timeout * timeout_scale) fail_collective(what, waited);
  }
}
#endif

}  // namespace

bool mpi_built() {
#ifdef ENGINE_WITH_MPI
  return true;
#else
  return false;
#endif
}

const World& init(int* argc, char*** argv) {
#ifdef ENGINE_WITH_MPI
  // Only under a launcher: a plain run stays a world of one without MPI's singleton start-up.
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  if (!launched || g_mpi_on) return g_world;
  int provided = 0;
  // Only the main thread calls MPI (OpenMP threads never do).
  mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  g_mpi_on = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);  // errors come back to mpi_check
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size);
  MPI_Comm local;
  mpi_check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &local),
            "MPI_Comm_split_type");
  MPI_Comm_rank(local, &g_world.local_rank);
  MPI_Comm_size(local, &g_world.local_size);
  MPI_Comm_free(&local);
  MPI_Op_create(&sum_16bit<kernels::half>, 1, &g_sum_f16);
  MPI_Op_create(&sum_16bit<kernels::bfloat16>, 1, &g_sum_bf16);
#else
  (void)argc;
  (void)argv;
  // Started by mpirun with several processes, a build without MPI would train N separate
  // copies that overwrite each other's files: refuse instead.
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (!size) size = std::getenv("PMI_SIZE");
  if (size && std::atoi(size) > 1)
    abort_job("launched as one of " + std::string(size) +
              " processes, but this build has no MPI (configure with Open MPI installed, ENGINE_MPI=ON)");
#endif
  return g_world;
}

const World& world() { return g_world; }

void init_nccl(Device device) {
#ifdef ENGINE_WITH_NCCL
  char id[nccl::kUniqueIdBytes] = {};
  if (g_world.rank == 0) nccl::make_unique_id(id);
  broadcast_bytes(id, sizeof id, 0, "NCCL unique id");  // a no-op in one process
  nccl::init(id, g_world.rank, g_world.size, device.index);
#else
  ENGINE_FAIL("data-parallel training on " << device.str()
                                           << " needs NCCL, and this build has none (configure with the CUDA "
                                              "backend and NCCL found, or train with --device cpu)");
#endif
}

void finalize() {
#ifdef ENGINE_WITH_NCCL
  nccl::finalize();
#endif
#ifdef ENGINE_WITH_MPI
  if (!g_mpi_on) return;
  MPI_Op_free(&g_sum_f16);
  MPI_Op_free(&g_sum_bf16);
  MPI_Finalize();
  g_mpi_on = false;
#endif
}

void set_timeout(double seconds) { g_timeout = seconds; }

void abort_job(const std::string& message, int code) {
  std::fflush(stdout);
  std::string line = "error: ";
  if (g_world.size > 1) line += "rank " + std::to_string(g_world.rank) + " of " + std::to_string(g_world.size) + ": ";
  line += message + "\n";
  ssize_t ignored = ::write(g_stderr_copy, line.data(), line.size());
  (void)ignored;
#ifdef ENGINE_WITH_MPI
  if (g_mpi_on && g_world.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

void quiet_other_ranks() {
  if (g_world.rank == 0) return;
  std::fflush(stdout);
  std::fflush(stderr);
  g_stderr_copy = ::dup(2);
  const int null_fd = ::open("/dev/null", O_WRONLY);
  if (null_fd < 0 || g_stderr_copy < 0) return;  // keep printing rather than lose errors
  ::dup2(null_fd, 1);
  ::dup2(null_fd, 2);
  ::close(null_fd);
}

void barrier(const char* what, double timeout_scale) {
#ifdef ENGINE_WITH_MPI
  if (!distributed()) return;
  MPI_Request req;
  mpi_check(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
  wait(req, what, timeout_scale);
#else
  (void)what;
  (void)timeout_scale;
#endif
}

void broadcast_bytes(void* data, size_t bytes, int root, const char* what) {
#ifdef ENGINE_WITH_MPI
  if (!distributed()) return;
  char* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {  // MPI counts are ints
    const int chunk = static_cast<int>(std::min<size_t>(bytes - done, size_t(1) << 30));
    MPI_Request req;
    mpi_check(MPI_Ibcast(p + done, chunk, MPI_BYTE, root, MPI_COMM_WORLD, &req), "MPI_Ibcast");
    wait(req, what);
    done += static_cast<size_t>(chunk);
  }
#else
  (void)data;
  (void)bytes;
  (void)root;
  (void)what;
#endif
}

void all_reduce_sum(double* values, size_t n, const char* what) {
#ifdef ENGINE_WITH_MPI
  if (!distributed() || n == 0) return;
  MPI_Request req;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, values, checked_count(static_cast<int64_t>(n), what), MPI_DOUBLE, MPI_SUM,
                           MPI_COMM_WORLD, &req),
            "MPI_Iallreduce");
  wait(req, what);
#else
  (void)values;
  (void)n;
  (void)what;
#endif
}

void all_reduce_sum(Tensor& t, const char* what) {
  if (t.numel() == 0) return;
  if (t.device().is_cuda()) {
    if (nccl_active()) {
#ifdef ENGINE_WITH_NCCL
      nccl::all_reduce_on_compute_stream(t.raw(), t.numel(), t.dtype());
#endif
      return;
    }
    ENGINE_CHECK(!distributed(), what << ": a CUDA tensor across ranks needs NCCL (dist::init_nccl)");
    return;
  }
  if (!distributed()) return;
#ifdef ENGINE_WITH_MPI
  const MpiSum s = mpi_sum(t.dtype());
  MPI_Request req;
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, t.raw(), checked_count(t.numel(), what), s.type, s.op, MPI_COMM_WORLD, &req),
            "MPI_Iallreduce");
  wait(req, what);
#endif
}

// ---- stopping together -------------------------------------------------------------------
StopVote::StopVote() {
#ifdef ENGINE_WITH_MPI
  static_assert(sizeof(MPI_Request) <= sizeof mpi_request_ && alignof(MPI_Request) <= 16,
                "StopVote::mpi_request_ must hold an MPI_Request");
  new (mpi_request_) MPI_Request(MPI_REQUEST_NULL);
#endif
}

StopVote::~StopVote() {
  // A vote every rank started must end on every rank before MPI_Finalize; the others are
  // finishing theirs too (same calls, same order), so this wait is short.
  if (pending_) finish_pending();
}

int StopVote::finish_pending() {
  if (!pending_) return 0;
  pending_ = false;
#ifdef ENGINE_WITH_MPI
  wait(*std::launder(reinterpret_cast<MPI_Request*>(mpi_request_)), "agreement on a stop request");
#endif
  return result_;
}

int StopVote::vote(int request_here) {
  if (!distributed()) return request_here;
  if (const int agreed = finish_pending()) return agreed;
#ifdef ENGINE_WITH_MPI
  request_ = request_here;
  mpi_check(MPI_Iallreduce(&request_, &result_, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD,
                           std::launder(reinterpret_cast<MPI_Request*>(mpi_request_))),
            "MPI_Iallreduce");
  pending_ = true;
#endif
  return 0;
}

int StopVote::vote_now(int request_here) {
  if (!distributed()) return request_here;
  const int earlier = finish_pending();
  int now = request_here;
#ifdef ENGINE_WITH_MPI
  MPI_Request req;
  mpi_check(MPI_Iallreduce(&request_here, &now, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &req), "MPI_Iallreduce");
  wait(req, "agreement on a stop request");
#endif
  return std::max(earlier, now);
}

// ---- the model's state across ranks --------------------------------------------------------
namespace {

// Every tensor and string of a state dict, rank 0's to all, in the map's (sorted) order.
void broadcast_state(StateDict& sd, const char* what) {
  for (auto& [name, t] : sd.tensors) broadcast_bytes(t.raw(), t.nbytes(), 0, what);
  std::string meta;
  for (const auto& [k, v] : sd.meta) meta += k + '\0' + v + '\0';
  uint64_t len = meta.size();
  broadcast_bytes(&len, sizeof len, 0, what);
  meta.resize(len);
  broadcast_bytes(meta.data(), len, 0, what);
  sd.meta.clear();
  for (size_t at = 0; at < meta.size();) {
    const size_t k_end = meta.find('\0', at), v_end = meta.find('\0', k_end + 1);
    sd.meta[meta.substr(at, k_end - at)] = meta.substr(k_end + 1, v_end - k_end - 1);
    at = v_end + 1;
  }
}

}  // namespace

uint64_t module_checksum(const Module& m) {
  StateDict sd;
  m.save_state(sd);
  uint64_t h = kFnv1aBasis;
  for (const auto& [name, t] : sd.tensors) {
    h = fnv1a(h, name.data(), name.size());
    h = fnv1a(h, t.raw(), t.nbytes());
  }
  for (const auto& [k, v] : sd.meta) {
    h = fnv1a(h, k.data(), k.size());
    h = fnv1a(h, v.data(), v.size());
  }
  return h;
}

void broadcast_module(Module& m) {
  if (!distributed()) return;
  StateDict sd;
  m.save_state(sd);
  ENGINE_CHECK(!sd.tensors.empty(), "broadcast_module: the model has no state");
  broadcast_state(sd, "broadcast of rank 0's weights");
  m.load_state(sd);
  // Verify: every rank's checksum, gathered as exact 32-bit halves, equals rank 0's.
  const uint64_t h = module_checksum(m);
  std::vector<double> all(2 * static_cast<size_t>(world().size), 0.0);
  all[2 * static_cast<size_t>(world().rank)] = static_cast<double>(h >> 32);
  all[2 * static_cast<size_t>(world().rank) + 1] = static_cast<double>(h & 0xffffffffu);
  all_reduce_sum(all.data(), all.size(), "checksum of the broadcast weights");
  for (int r = 1; r < world().size; ++r)
    ENGINE_CHECK(all[2 * r] == all[0] && all[2 * r + 1] == all[1],
                 "after the broadcast, rank " << r << "'s weights differ from rank 0's");
}

void broadcast_buffers(Module& m) {
  if (!distributed()) return;
  StateDict sd;
  m.save_state(sd);
  for (auto it = sd.tensors.begin(); it != sd.tensors.end();)  // the masters are equal already
    it = it->first.rfind("param/", 0) == 0 ? sd.tensors.erase(it) : std::next(it);
  if (sd.tensors.empty()) return;
  broadcast_state(sd, "broadcast of rank 0's batch-norm statistics");
  m.load_extra("", sd);
}

void set_sync_batch_norm(bool on) { g_sync_bn = on; }
bool sync_batch_norm() { return g_sync_bn && (distributed() || nccl_active()); }

bool nccl_active() {
#ifdef ENGINE_WITH_NCCL
  return nccl::initialized();
#else
  return false;
#endif
}

// ---- the gradient reducer -------------------------------------------------------------------
struct GradReducer::Bucket {
  DType dtype;
  Tensor flat;                  // every member's gradient is a view into it
  std::vector<size_t> members;  // indices into params_
  size_t waiting = 0;           // members whose gradient is not final yet this step
#ifdef ENGINE_WITH_MPI
  MPI_Request request = MPI_REQUEST_NULL;
#endif
};

GradReducer::GradReducer(std::vector<ParamPtr> params, size_t bucket_bytes, size_t first_bucket_bytes)
    : params_(std::move(params)) {
  ENGINE_CHECK(!params_.empty(), "GradReducer: no parameters");
  const Device dev = params_[0]->value.device();
  on_cuda_ = dev.is_cuda();
#ifndef ENGINE_WITH_NCCL
  ENGINE_CHECK(!on_cuda_ || !distributed(), "data-parallel training on CUDA needs NCCL, and this build has none");
#else
  ENGINE_CHECK(!on_cuda_ || !distributed() || nccl::initialized(),
               "data-parallel training on CUDA: dist::init_nccl first");
#endif
  // Group in reverse order, by gradient dtype, up to the caps.
  std::vector<std::vector<size_t>> groups;
  std::vector<DType> dtypes;
  size_t bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& v = params_[k]->value;
    ENGINE_CHECK(v.device() == dev, "GradReducer: parameters on different devices");
    const size_t nb = v.nbytes(), cap = groups.size() <= 1 ? first_bucket_bytes : bucket_bytes;
    if (groups.empty() || dtypes.back() != v.dtype() || (bytes > 0 && bytes + nb > cap)) {
      groups.emplace_back();
      dtypes.push_back(v.dtype());
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += nb;
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    auto b = std::make_unique<Bucket>();
    b->dtype = dtypes[g];
    b->members = groups[g];
    int64_t n = 0;
    for (size_t k : b->members) n += params_[k]->value.numel();
    b->flat = Tensor::empty({n}, b->dtype, dev, MemKind::Gradients);
    b->flat.zero();
    int64_t at = 0;
    for (size_t k : b->members) {
      Tensor& v = params_[k]->value;
      const int64_t e = v.numel();
      v.set_grad(b->flat.slice0(at, at + e).view(v.shape()));  // the old gradient, if any, is freed
      bucket_of_.emplace_back(v.impl(), g);
      at += e;
    }
    buckets_.push_back(std::move(b));
  }
  std::sort(bucket_of_.begin(), bucket_of_.end());
}

GradReducer::~GradReducer() = default;

void GradReducer::attach(Tape& tape) {
  for (auto& b : buckets_) b->waiting = b->members.size();
  next_to_start_ = 0;
  tape.on_grad_ready = [this](const Tensor& leaf) { ready(leaf); };
}

void GradReducer::ready(const Tensor& leaf) {
  auto it = std::lower_bound(bucket_of_.begin(), bucket_of_.end(), std::pair<const TensorImpl*, size_t>(leaf.impl(), 0));
  if (it == bucket_of_.end() || it->first != leaf.impl()) return;  // a leaf that is not a parameter
  Bucket& b = *buckets_[it->second];
  if (b.waiting > 0 && --b.waiting == 0) launch_in_order();
#ifdef ENGINE_WITH_MPI
  // MPI moves a non-blocking collective along only inside MPI calls: nudge the started ones.
  if (!on_cuda_ && distributed())
    for (size_t i = 0; i < next_to_start_; ++i) {
      int done = 0;
      if (buckets_[i]->request != MPI_REQUEST_NULL) MPI_Test(&buckets_[i]->request, &done, MPI_STATUS_IGNORE);
    }
#endif
}

// Buckets start in index order on every rank, so the collectives match even when backward
// finishes them in another order.
void GradReducer::launch_in_order() {
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_]->waiting == 0) start(*buckets_[next_to_start_++]);
}

void GradReducer::start(Bucket& b) {
  if (on_cuda_) {
#ifdef ENGINE_WITH_NCCL
    if (nccl::initialized()) nccl::all_reduce_on_comm_stream(b.flat.raw(), b.flat.numel(), b.dtype);
#endif
    return;
  }
  if (!distributed()) return;
#ifdef ENGINE_WITH_MPI
  const MpiSum s = mpi_sum(b.dtype);
  mpi_check(MPI_Iallreduce(MPI_IN_PLACE, b.flat.raw(), checked_count(b.flat.numel(), "gradient bucket"), s.type, s.op,
                           MPI_COMM_WORLD, &b.request),
            "MPI_Iallreduce");
#endif
}

void GradReducer::finish() {
  started_early_ = next_to_start_;
  for (auto& b : buckets_) b->waiting = 0;  // parameters backward did not reach: zero gradients
  launch_in_order();
  for (auto& b : buckets_)
    for (size_t k : b->members)
      ENGINE_CHECK(params_[k]->value.grad().defined() && params_[k]->value.grad().same_storage(b->flat),
                   "GradReducer: parameter " << params_[k]->name
                                             << "'s gradient no longer lives in its bucket (was it replaced?)");
  if (on_cuda_) {
#ifdef ENGINE_WITH_NCCL
    if (nccl::initialized()) nccl::join_comm_stream();
#endif
    return;
  }
  if (!distributed()) return;
#ifdef ENGINE_WITH_MPI
  for (auto& b : buckets_) wait(b->request, "gradient all-reduce");
#endif
}

std::vector<GradReducer::BucketInfo> GradReducer::buckets() const {
  std::vector<BucketInfo> out;
  for (const auto& b : buckets_) out.push_back({b->dtype, b->flat.numel(), b->members.size()});
  return out;
}

int64_t GradReducer::bytes_per_step() const {
  int64_t n = 0;
  for (const auto& b : buckets_) n += static_cast<int64_t>(b->flat.nbytes());
  return n;
}

}  // namespace engine::dist

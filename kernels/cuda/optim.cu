// Multi-tensor fused optimizer kernels: blockIdx.x -> (slot, chunk start) through a table
// built once; each block updates up to kChunk elements of one parameter.
#include "kernels/cuda/optim.h"

#include <cuda_runtime.h>

#include <cmath>

#include "kernels/convert.h"
#include "kernels/quant_math.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/launch.cuh"

namespace kernels::cuda {

using detail::kBlock;

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::None: return "none";
    case ElemType::F32: return "f32";
    case ElemType::F64: return "f64";
    case ElemType::F16: return "f16";
    case ElemType::BF16: return "bf16";
  }
  return "?";
}

namespace {

struct Chunk {
  int32_t slot;
  int64_t begin;
};

// The CPU's convert<float>(grad[i]); the type switch is uniform across the block.
__device__ __forceinline__ float load_grad(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::F64: return convert<float>(static_cast<const double*>(p)[i]);
    case ElemType::F16: return convert<float>(static_cast<const half*>(p)[i]);
    case ElemType::BF16: return convert<float>(static_cast<const bfloat16*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_copy(void* p, ElemType t, int64_t i, float v) {
  switch (t) {
    case ElemType::F32: static_cast<float*>(p)[i] = v; break;
    case ElemType::F64: static_cast<double*>(p)[i] = convert<double>(v); break;
    case ElemType::F16: static_cast<half*>(p)[i] = convert<half>(v); break;
    case ElemType::BF16: static_cast<bfloat16*>(p)[i] = convert<bfloat16>(v); break;
    case ElemType::None: break;
  }
}

__device__ __forceinline__ bool grad_nonfinite(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::F64: return !isfinite(static_cast<const double*>(p)[i]);
    case ElemType::F16: return (static_cast<const half*>(p)[i].bits & 0x7c00u) == 0x7c00u;
    case ElemType::BF16: return (static_cast<const bfloat16*>(p)[i].bits & 0x7f80u) == 0x7f80u;
    default: return !isfinite(static_cast<const float*>(p)[i]);
  }
}

__global__ void __launch_bounds__(kBlock)
    multi_finite_kernel(const ParamSlot* slots, const Chunk* chunks, int64_t chunk, int* found_inf) {
  const Chunk ck = chunks[blockIdx.x];
  const ParamSlot s = slots[ck.slot];
  const int64_t end = min(ck.begin + chunk, s.n);
  bool bad = false;
  for (int64_t i = ck.begin + threadIdx.x; i < end; i += blockDim.x) bad |= grad_nonfinite(s.grad, s.grad_type, i);
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *found_inf = 1;
}

// ---- compact state: one quantisation block (kQuantBlock = blockDim.x values) per iteration ----
static_assert(kQuantBlock == kBlock, "one thread per value of a quantisation block");
static_assert(MultiTensorPlan::kChunk % kQuantBlock == 0, "chunks hold whole quantisation blocks");

// The largest |v| over the thread block (every thread calls it; all get the result).
__device__ __forceinline__ float block_abs_max(float v, float* scratch) {
  v = fabsf(v);
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = 0.0f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) m = fmaxf(m, scratch[w]);
  __syncthreads();  // scratch is reused by the next call
  return m;
}

__device__ __forceinline__ float load_compact(const ParamSlot& s, bool first, int64_t i) {
  const void* q = first ? s.qstate1 : s.qstate2;
  if (s.state_format == StateFormat::BF16) return convert<float>(static_cast<const bfloat16*>(q)[i]);
  const float a = (first ? s.absmax1 : s.absmax2)[i / kQuantBlock];
  const uint8_t c = static_cast<const uint8_t*>(q)[i];
  return first ? decode_signed(c, a) : decode_unsigned(c, a);
}

// Stores a thread's value; Int8 first agrees the block's new absmax (all threads call this).
__device__ __forceinline__ void store_compact(const ParamSlot& s, bool first, int64_t i, bool active, float v,
                                              float* scratch) {
  void* q = first ? s.qstate1 : s.qstate2;
  if (s.state_format == StateFormat::BF16) {
    if (active) static_cast<bfloat16*>(q)[i] = convert<bfloat16>(v);
    return;
  }
  const float a = block_abs_max(active ? v : 0.0f, scratch);
  if (threadIdx.x == 0) (first ? s.absmax1 : s.absmax2)[i / kQuantBlock] = a;
  if (active)
    static_cast<uint8_t*>(q)[i] = a > 0.0f ? (first ? encode_signed(v, a) : encode_unsigned(v, a)) : uint8_t(0);
}

__device__ void sgd_compact(const ParamSlot& s, const Chunk& ck, int64_t chunk, const SgdConfig& cfg, float inv,
                            bool first_step) {
  __shared__ float scratch[32];
  const int64_t end = min(ck.begin + chunk, s.n);
  for (int64_t base = ck.begin; base < end; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const bool active = i < end;
    float buf = 0.0f;
    if (active) {
      buf = load_compact(s, true, i);
      float w = s.master[i];
      sgd_update<float>(w, load_grad(s.grad, s.grad_type, i) * inv, &buf, first_step, cfg);
      s.master[i] = w;
      if (s.copy) store_copy(s.copy, s.copy_type, i, w);
    }
    store_compact(s, true, i, active, buf, scratch);
  }
}

__device__ void adam_compact(const ParamSlot& s, const Chunk& ck, int64_t chunk, const AdamConfig& cfg, float inv) {
  __shared__ float scratch[32];
  const int64_t end = min(ck.begin + chunk, s.n);
  for (int64_t base = ck.begin; base < end; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    const bool active = i < end;
    float m = 0.0f, v = 0.0f;
    if (active) {
      m = load_compact(s, true, i);
      v = load_compact(s, false, i);
      float w = s.master[i];
      adam_update<float>(w, load_grad(s.grad, s.grad_type, i) * inv, m, v, cfg);
      s.master[i] = w;
      if (s.copy) store_copy(s.copy, s.copy_type, i, w);
    }
    store_compact(s, true, i, active, m, scratch);
    store_compact(s, false, i, active, v, scratch);
  }
}

__global__ void __launch_bounds__(kBlock)
    multi_sgd_kernel(const ParamSlot* slots, const Chunk* chunks, int64_t chunk, SgdConfig all, StepScalars sc) {
  if (sc.found_inf && *sc.found_inf) return;  // the whole step is skipped
  const Chunk ck = chunks[blockIdx.x];
  const ParamSlot s = slots[ck.slot];
  const SgdConfig cfg = for_group(all, s.lr_scale, s.weight_decay);
  const float inv = sc.inv_scale ? *sc.inv_scale : 1.0f;
  const bool first = sc.step ? (*sc.step == 0) : sc.first_step;
  if (s.state_format != StateFormat::F32 && cfg.momentum != 0) {  // uniform across the block
    sgd_compact(s, ck, chunk, cfg, inv, first);
    return;
  }
  const int64_t end = min(ck.begin + chunk, s.n);
  for (int64_t i = ck.begin + threadIdx.x; i < end; i += blockDim.x) {
    float w = s.master[i];
    sgd_update<float>(w, load_grad(s.grad, s.grad_type, i) * inv, s.state1 ? s.state1 + i : nullptr, first, cfg);
    s.master[i] = w;
    if (s.copy) store_copy(s.copy, s.copy_type, i, w);
  }
}

__global__ void __launch_bounds__(kBlock)
    multi_adam_kernel(const ParamSlot* slots, const Chunk* chunks, int64_t chunk, AdamConfig all, StepScalars sc) {
  if (sc.found_inf && *sc.found_inf) return;
  if (sc.step) {
    // The host's formula (engine/optim.cpp), in double, from the device step count.
    const double t = static_cast<double>(*sc.step + 1);
    all.bias_correction1 = 1.0 - pow(all.beta1, t);
    all.bias_correction2 = 1.0 - pow(all.beta2, t);
  }
  const Chunk ck = chunks[blockIdx.x];
  const ParamSlot s = slots[ck.slot];
  const AdamConfig cfg = for_group(all, s.lr_scale, s.weight_decay);
  const float inv = sc.inv_scale ? *sc.inv_scale : 1.0f;
  if (s.state_format != StateFormat::F32) {  // uniform across the block
    adam_compact(s, ck, chunk, cfg, inv);
    return;
  }
  const int64_t end = min(ck.begin + chunk, s.n);
  for (int64_t i = ck.begin + threadIdx.x; i < end; i += blockDim.x) {
    float w = s.master[i], m = s.state1[i], v = s.state2[i];
    adam_update<float>(w, load_grad(s.grad, s.grad_type, i) * inv, m, v, cfg);
    s.master[i] = w;
    s.state1[i] = m;
    s.state2[i] = v;
    if (s.copy) store_copy(s.copy, s.copy_type, i, w);
  }
}

// One partial per chunk: the sum of (double(g) * inv)^2 over its elements, in FP64.
__global__ void __launch_bounds__(kBlock)
    multi_sq_norm_kernel(const ParamSlot* slots, const Chunk* chunks, int64_t chunk, const float* inv_scale,
                         double* partials) {
  __shared__ double scratch[32];
  const Chunk ck = chunks[blockIdx.x];
  const ParamSlot s = slots[ck.slot];
  const double inv = inv_scale ? static_cast<double>(*inv_scale) : 1.0;
  const int64_t end = min(ck.begin + chunk, s.n);
  double sq = 0;
  for (int64_t i = ck.begin + threadIdx.x; i < end; i += blockDim.x) {
    // FP64 gradients squared in FP64 as the CPU does (load_grad would narrow them to float).
    const double g = s.grad_type == ElemType::F64 ? static_cast<const double*>(s.grad)[i]
                                                   : static_cast<double>(load_grad(s.grad, s.grad_type, i));
    const double v = g * inv;
    sq += v * v;
  }
  sq = detail::block_sum(sq, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = sq;
}

// The partials summed by one block in a fixed order: thread t takes t, t + blockDim, ...
__global__ void __launch_bounds__(kBlock) sum_partials_kernel(const double* partials, int64_t n, double* out) {
  __shared__ double scratch[32];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += partials[i];
  acc = detail::block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

__global__ void clip_scale_kernel(const double* sq_sum, double max_norm, const float* inv_scale,
                                  const int* found_inf, double* norm, float* clipped_inv_scale) {
  // An overflowed step reports an infinite norm, as on the CPU (its update is skipped anyway).
  const double n = (found_inf && *found_inf) ? HUGE_VAL : sqrt(*sq_sum);
  *norm = n;
  const double coef = max_norm / (n + 1e-6);  // the CPU's LossScaler::clip_grad_norm
  const double inv = inv_scale ? static_cast<double>(*inv_scale) : 1.0;
  *clipped_inv_scale = static_cast<float>(inv * (coef < 1.0 ? coef : 1.0));
}

__global__ void advance_step_kernel(int64_t* step, const int* found_inf) {
  if (!(found_inf && *found_inf)) ++*step;
}

}  // namespace

MultiTensorPlan::MultiTensorPlan(const std::vector<ParamSlot>& slots, cudaStream_t stream) : host_slots_(slots) {
  ENGINE_CHECK(slots.size() < static_cast<size_t>(INT32_MAX), "MultiTensorPlan: too many parameters");
  std::vector<Chunk> table;
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot& s = slots[i];
    ENGINE_CHECK(s.n >= 0, "MultiTensorPlan: parameter " << i << " has n = " << s.n);
    if (s.n == 0) continue;
    ENGINE_CHECK(s.grad && s.master, "MultiTensorPlan: parameter " << i << " needs a gradient and a master");
    ENGINE_CHECK(s.grad_type != ElemType::None, "MultiTensorPlan: parameter " << i << " has no gradient type");
    ENGINE_CHECK((s.copy == nullptr) == (s.copy_type == ElemType::None),
                 "MultiTensorPlan: parameter " << i << ": a compute copy needs its type (and vice versa)");
    for (int64_t b = 0; b < s.n; b += kChunk) table.push_back(Chunk{static_cast<int32_t>(i), b});
    elements_ += s.n;
  }
  chunks_ = static_cast<int64_t>(table.size());
  ENGINE_CHECK(chunks_ < (int64_t(1) << 31), "MultiTensorPlan: " << chunks_ << " chunks exceed one grid");
  slots_bytes_ = sizeof(ParamSlot) * slots.size();
  chunks_bytes_ = sizeof(Chunk) * table.size();
  // Long-lived and tiny: counted with the optimizer state.
  if (slots_bytes_) {
    d_slots_ = cuda_allocator().allocate(slots_bytes_, kernels::MemKind::OptimizerState);
    CHECK_CUDA(cudaMemcpyAsync(d_slots_, slots.data(), slots_bytes_, cudaMemcpyHostToDevice, stream));
  }
  if (chunks_bytes_) {
    d_chunks_ = cuda_allocator().allocate(chunks_bytes_, kernels::MemKind::OptimizerState);
    CHECK_CUDA(cudaMemcpyAsync(d_chunks_, table.data(), chunks_bytes_, cudaMemcpyHostToDevice, stream));
  }
  if (chunks_ > 0)
    d_partials_ = static_cast<double*>(
        cuda_allocator().allocate(sizeof(double) * static_cast<size_t>(chunks_), kernels::MemKind::OptimizerState));
  // The host vectors die with this constructor: wait until the copies have read them.
  CHECK_CUDA(cudaStreamSynchronize(stream));
}

MultiTensorPlan::~MultiTensorPlan() {
  if (d_slots_) cuda_allocator().deallocate(d_slots_, slots_bytes_, kernels::MemKind::OptimizerState);
  if (d_chunks_) cuda_allocator().deallocate(d_chunks_, chunks_bytes_, kernels::MemKind::OptimizerState);
  if (d_partials_)
    cuda_allocator().deallocate(d_partials_, sizeof(double) * static_cast<size_t>(chunks_),
                                kernels::MemKind::OptimizerState);
}

void multi_all_finite(const MultiTensorPlan& plan, int* found_inf, cudaStream_t stream) {
  if (plan.chunks() == 0) return;
  multi_finite_kernel<<<static_cast<unsigned>(plan.chunks()), kBlock, 0, stream>>>(
      static_cast<const ParamSlot*>(plan.device_slots()), static_cast<const Chunk*>(plan.device_chunks()),
      MultiTensorPlan::kChunk, found_inf);
  CHECK_LAUNCH();
}

void multi_sgd_step(const MultiTensorPlan& plan, const SgdConfig& cfg, const StepScalars& sc, cudaStream_t stream) {
  if (plan.chunks() == 0) return;
  if (cfg.momentum != 0) {
    for (size_t i = 0; i < plan.slots().size(); ++i)
      ENGINE_CHECK(plan.slots()[i].n == 0 || plan.slots()[i].state1 || plan.slots()[i].qstate1,
                   "multi_sgd_step: parameter " << i << " needs a momentum buffer (state1 or qstate1)");
  }
  multi_sgd_kernel<<<static_cast<unsigned>(plan.chunks()), kBlock, 0, stream>>>(
      static_cast<const ParamSlot*>(plan.device_slots()), static_cast<const Chunk*>(plan.device_chunks()),
      MultiTensorPlan::kChunk, cfg, sc);
  CHECK_LAUNCH();
}

void multi_adam_step(const MultiTensorPlan& plan, const AdamConfig& cfg, const StepScalars& sc, cudaStream_t stream) {
  if (plan.chunks() == 0) return;
  for (size_t i = 0; i < plan.slots().size(); ++i)
    ENGINE_CHECK(plan.slots()[i].n == 0 || (plan.slots()[i].state1 && plan.slots()[i].state2) ||
                     (plan.slots()[i].qstate1 && plan.slots()[i].qstate2),
                 "multi_adam_step: parameter " << i << " needs exp_avg (state1) and exp_avg_sq (state2)");
  multi_adam_kernel<<<static_cast<unsigned>(plan.chunks()), kBlock, 0, stream>>>(
      static_cast<const ParamSlot*>(plan.device_slots()), static_cast<const Chunk*>(plan.device_chunks()),
      MultiTensorPlan::kChunk, cfg, sc);
  CHECK_LAUNCH();
}

void multi_grad_sq_norm(const MultiTensorPlan& plan, const float* inv_scale, double* sq_sum, cudaStream_t stream) {
  if (plan.chunks() == 0) {
    CHECK_CUDA(cudaMemsetAsync(sq_sum, 0, sizeof(double), stream));
    return;
  }
  multi_sq_norm_kernel<<<static_cast<unsigned>(plan.chunks()), kBlock, 0, stream>>>(
      static_cast<const ParamSlot*>(plan.device_slots()), static_cast<const Chunk*>(plan.device_chunks()),
      MultiTensorPlan::kChunk, inv_scale, plan.device_partials());
  CHECK_LAUNCH();
  sum_partials_kernel<<<1, kBlock, 0, stream>>>(plan.device_partials(), plan.chunks(), sq_sum);
  CHECK_LAUNCH();
}

void clip_scale(const double* sq_sum, double max_norm, const float* inv_scale, const int* found_inf, double* norm,
                float* clipped_inv_scale, cudaStream_t stream) {
  ENGINE_CHECK(max_norm > 0, "clip_scale: max norm " << max_norm << " must be positive");
  clip_scale_kernel<<<1, 1, 0, stream>>>(sq_sum, max_norm, inv_scale, found_inf, norm, clipped_inv_scale);
  CHECK_LAUNCH();
}

void advance_step(int64_t* step, const int* found_inf, cudaStream_t stream) {
  advance_step_kernel<<<1, 1, 0, stream>>>(step, found_inf);
  CHECK_LAUNCH();
}

}  // namespace kernels::cuda

// The CUDA build's side of engine/device.h (discovery, copies, fills) and of
// engine/cuda/backend.h (the optimizer's plan, the loss scaler's kernels): the engine's
// tensors turned into the raw pointers the kernels in kernels/cuda take.
#include "engine/cuda/backend.h"

#include "engine/device.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/runtime.h"
#include "kernels/cuda/scaler.h"

namespace engine {

bool cuda_built() { return true; }
int cuda_device_count(std::string* why) { return kernels::cuda::device_count(why); }
void set_cuda_deterministic(bool on) { kernels::cuda::set_deterministic(on); }
std::string cuda_library_versions() { return kernels::cuda::library_versions(); }

void register_cuda_backend() {
  static const bool once = [] {
    register_cuda_allocator(&kernels::cuda::cuda_allocator());
    return true;
  }();
  (void)once;
}

void device_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  kernels::cuda::copy(dst, dst_dev.is_cuda(), src, src_dev.is_cuda(), bytes);
}

void device_memset_zero(void* dst, Device, size_t bytes) {
  // On the engine's stream (not the legacy default one): zero_grad runs every step.
  kernels::cuda::zero(dst, bytes, kernels::cuda::default_stream());
}

bool device_fill(void* dst, Device, DType t, double value, int64_t n) {
  const auto stream = kernels::cuda::default_stream();  // the context's device
  switch (t) {
    case DType::F32: kernels::cuda::fill(static_cast<float*>(dst), value, n, stream); return true;
    case DType::F16: kernels::cuda::fill(static_cast<half*>(dst), value, n, stream); return true;
    case DType::BF16: kernels::cuda::fill(static_cast<bfloat16*>(dst), value, n, stream); return true;
    default: return false;
  }
}

}  // namespace engine

namespace engine::cuda {

namespace kc = kernels::cuda;

namespace {

kc::ElemType elem_type(DType t) {
  switch (t) {
    case DType::F32: return kc::ElemType::F32;
    case DType::F64: return kc::ElemType::F64;
    case DType::F16: return kc::ElemType::F16;
    case DType::BF16: return kc::ElemType::BF16;
    default: ENGINE_FAIL("optimizer: no CUDA element type for " << dtype_name(t));
  }
}

bool same_slot(const kc::ParamSlot& a, const kc::ParamSlot& b) {
  return a.grad == b.grad && a.grad_type == b.grad_type && a.master == b.master && a.state1 == b.state1 &&
         a.state2 == b.state2 && a.copy == b.copy && a.copy_type == b.copy_type && a.n == b.n &&
         a.state_format == b.state_format && a.qstate1 == b.qstate1 && a.qstate2 == b.qstate2 &&
         a.absmax1 == b.absmax1 && a.absmax2 == b.absmax2 && a.lr_scale == b.lr_scale &&
         a.weight_decay == b.weight_decay;
}

class CudaOptimizerPlan final : public OptimizerPlan {
 public:
  void set_params(const std::vector<ParamRefs>& params) override {
    std::vector<kc::ParamSlot> slots(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamRefs& p = params[i];
      kc::ParamSlot& sl = slots[i];
      sl.grad = p.grad.raw();
      sl.grad_type = elem_type(p.grad.dtype());
      sl.master = p.master;
      sl.lr_scale = p.lr_scale;
      sl.weight_decay = p.weight_decay;
      sl.state1 = p.state1;
      sl.state2 = p.state2;
      sl.state_format = p.state_format;
      sl.qstate1 = p.qstate1;
      sl.qstate2 = p.qstate2;
      sl.absmax1 = p.absmax1;
      sl.absmax2 = p.absmax2;
      sl.copy = p.copy.defined() ? p.copy.raw() : nullptr;
      sl.copy_type = p.copy.defined() ? elem_type(p.copy.dtype()) : kc::ElemType::None;
      sl.n = p.grad.numel();
    }
    bool same = plan_ && slots_.size() == slots.size();
    for (size_t i = 0; same && i < slots.size(); ++i) same = same_slot(slots_[i], slots[i]);
    if (same) return;
    plan_ = std::make_unique<kc::MultiTensorPlan>(slots, kc::default_stream());
    slots_ = std::move(slots);
  }
  void check_finite(int* found_inf) override { kc::multi_all_finite(*plan_, found_inf, kc::default_stream()); }
  void grad_sq_norm(const float* inv_scale, double* sq_sum) override {
    kc::multi_grad_sq_norm(*plan_, inv_scale, sq_sum, kc::default_stream());
  }
  void sgd_step(const kernels::SgdConfig& c, const float* inv_scale, const int* found_inf, int64_t* step) override {
    kc::multi_sgd_step(*plan_, c, scalars(inv_scale, found_inf, step), kc::default_stream());
    kc::advance_step(step, found_inf, kc::default_stream());
  }
  void adam_step(const kernels::AdamConfig& c, const float* inv_scale, const int* found_inf, int64_t* step) override {
    kc::multi_adam_step(*plan_, c, scalars(inv_scale, found_inf, step), kc::default_stream());
    kc::advance_step(step, found_inf, kc::default_stream());
  }

 private:
  static kc::StepScalars scalars(const float* inv_scale, const int* found_inf, const int64_t* step) {
    kc::StepScalars sc;
    sc.inv_scale = inv_scale;
    sc.found_inf = found_inf;
    sc.step = step;  // SGD's first step and Adam's bias corrections come from the device count
    return sc;
  }
  std::vector<kc::ParamSlot> slots_;
  std::unique_ptr<kc::MultiTensorPlan> plan_;
};

class CudaCounterMirror final : public CounterMirror {
 public:
  void post(const Tensor& counter) override { mirror_.post(counter.data<int64_t>(), kc::default_stream()); }
  bool poll(int64_t* value) override { return mirror_.poll(value); }
  bool posted() const override { return mirror_.posted(); }

 private:
  kc::HostMirror mirror_;
};

}  // namespace

std::unique_ptr<OptimizerPlan> make_optimizer_plan() { return std::make_unique<CudaOptimizerPlan>(); }
std::unique_ptr<CounterMirror> make_counter_mirror() { return std::make_unique<CudaCounterMirror>(); }

void scale_by_device_scalar(const Tensor& x, const Tensor& scale, Tensor& y) {
  kc::scale_by_device_scalar(x.data<float>(), scale.data<float>(), y.data<float>(), x.numel(), kc::default_stream());
}

void scaler_prepare(const Tensor& scale, Tensor& inv_scale, Tensor& found_inf) {
  kc::scaler_prepare(scale.data<float>(), inv_scale.data<float>(), found_inf.data<int32_t>(), kc::default_stream());
}

void clip_scale(const Tensor& sq_sum, double max_norm, const Tensor& inv_scale, const Tensor& found_inf, Tensor& norm,
                Tensor& clipped_inv_scale) {
  kc::clip_scale(sq_sum.data<double>(), max_norm, inv_scale.data<float>(), found_inf.data<int32_t>(),
                 norm.data<double>(), clipped_inv_scale.data<float>(), kc::default_stream());
}

void scaler_update(Tensor& scale, Tensor& tracker, Tensor& skipped, Tensor& consecutive, const Tensor& found_inf,
                   const kernels::ScalerRule& rule) {
  kc::scaler_update(scale.data<float>(), tracker.data<int32_t>(), reinterpret_cast<long long*>(skipped.data<int64_t>()),
                    reinterpret_cast<long long*>(consecutive.data<int64_t>()), found_inf.data<int32_t>(), rule,
                    kc::default_stream());
}

}  // namespace engine::cuda

// Autocast: the policy (which ops run in the compute dtype, which in FP32), the thread's scope,
// and what an op's inputs become under it: the ops whose policy casts (conv2d, linear, sum,
// cross_entropy) pass their inputs through autocast_input.
#include "engine/autocast.h"

#include <unordered_map>

#include "engine/ops.h"
#include "engine/error.h"

namespace engine {

Precision op_precision(const std::string& op) {
  static const std::unordered_map<std::string, Precision> policy = {
      {"conv2d", Precision::ComputeDtype},   {"linear", Precision::ComputeDtype},
      {"cross_entropy", Precision::Fp32},    {"sum", Precision::Fp32},
      {"batch_norm", Precision::KeepInput},  // data keeps its dtype; statistics and parameters are FP32 inside
      {"global_avg_pool", Precision::KeepInput},  // sums in FP32 inside, result in the input dtype
      {"relu", Precision::KeepInput},        {"gelu", Precision::KeepInput},
      {"sigmoid", Precision::KeepInput},     {"silu", Precision::KeepInput},  // FP32 math inside, as gelu
      {"channel_gate", Precision::KeepInput},  // x and gate share the compute dtype; the gate's sums in FP32
      {"add", Precision::KeepInput},         {"scale", Precision::KeepInput},
      {"dropout", Precision::KeepInput},     {"max_pool2d", Precision::KeepInput},
      {"reshape", Precision::KeepInput},     {"flatten", Precision::KeepInput},
  };
  auto it = policy.find(op);
  ENGINE_CHECK(it != policy.end(), "op_precision: no policy for op '" << op << "'");
  return it->second;
}

namespace {
thread_local bool t_autocast = false;
thread_local DType t_autocast_dtype = DType::F32;
}  // namespace

AutocastScope::AutocastScope(DType dtype, bool enabled) : saved_enabled_(t_autocast), saved_dtype_(t_autocast_dtype) {
  ENGINE_CHECK(is_floating(dtype), "autocast: " << dtype_name(dtype) << " is not a floating dtype");
  t_autocast = enabled;
  if (enabled) t_autocast_dtype = dtype;
}
AutocastScope::~AutocastScope() {
  t_autocast = saved_enabled_;
  t_autocast_dtype = saved_dtype_;
}
bool autocast_enabled() { return t_autocast; }
DType autocast_dtype() { return t_autocast_dtype; }

Tensor autocast_input(const char* op, const Tensor& t) {
  if (!t_autocast || !t.defined() || !is_floating(t.dtype())) return t;
  switch (op_precision(op)) {
    case Precision::ComputeDtype: return t.dtype() == t_autocast_dtype ? t : cast(t, t_autocast_dtype);
    case Precision::Fp32:  // widened, never narrowed (FP64 stays FP64)
      return t.dtype() == DType::F16 || t.dtype() == DType::BF16 ? cast(t, DType::F32) : t;
    case Precision::KeepInput: return t;
  }
  return t;
}

}  // namespace engine

// Which of cuDNN's candidate algorithms a convolution may use under the run's rules (strict
// FP32, deterministic), why each other one was passed over, and the order in which the rules
// are relaxed when nothing runs within them. Plain C++ with no cuDNN types, so the CPU tests
// check the choice itself; kernels/cuda/conv.cu applies it to cuDNN's answers.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace kernels {

// One candidate as cuDNN describes it (cudnnConvolution*AlgoPerf_t, reduced to what we test).
struct ConvCandidate {
  int algo = 0;
  bool supported = true;      // cuDNN's status for it is CUDNN_STATUS_SUCCESS
  bool tensor_cores = false;  // its math type uses Tensor Cores (TF32 for FP32 data)
  bool deterministic = true;  // CUDNN_DETERMINISTIC
};

struct ConvRules {
  bool strict_fp32 = false;    // FP32 data with TF32 off: FMA-only algorithms
  bool deterministic = false;  // the trainer's --deterministic (cudnn.deterministic)
  bool operator==(const ConvRules& o) const {
    return strict_fp32 == o.strict_fp32 && deterministic == o.deterministic;
  }
};

enum class ConvVerdict { Usable, Unsupported, TensorCores, NotDeterministic };

inline ConvVerdict judge_conv_candidate(const ConvCandidate& c, const ConvRules& r) {
  if (!c.supported) return ConvVerdict::Unsupported;
  if (r.strict_fp32 && c.tensor_cores) return ConvVerdict::TensorCores;
  if (r.deterministic && !c.deterministic) return ConvVerdict::NotDeterministic;
  return ConvVerdict::Usable;
}

// How many candidates of one list each filter removed, for the error a shape ends in.
struct ConvFilterCounts {
  int candidates = 0, unsupported = 0, tensor_cores = 0, not_deterministic = 0, over_workspace = 0, refused = 0;
  void add(ConvVerdict v) {
    ++candidates;
    unsupported += v == ConvVerdict::Unsupported;
    tensor_cores += v == ConvVerdict::TensorCores;
    not_deterministic += v == ConvVerdict::NotDeterministic;
  }
  std::string str() const {
    std::ostringstream os;
    os << candidates << " candidates: " << unsupported << " not supported by cuDNN, " << tensor_cores
       << " Tensor Core (TF32), barred by strict FP32, " << not_deterministic << " not deterministic, "
       << over_workspace << " over the workspace limit, " << refused << " refused when run";
    return os.str();
  }
};

// The rule sets to try, in order: those asked for; then without determinism (bits may vary
// between runs, FP32 accuracy kept); then without strict FP32 (TF32 Tensor Cores), still
// deterministic if that was asked; then without either. A relaxation that changes nothing is
// left out.
inline std::vector<ConvRules> conv_relaxations(const ConvRules& asked) {
  std::vector<ConvRules> out{asked};
  if (asked.deterministic) out.push_back(ConvRules{asked.strict_fp32, false});
  if (asked.strict_fp32 && asked.deterministic) out.push_back(ConvRules{false, true});
  if (asked.strict_fp32) out.push_back(ConvRules{false, false});
  return out;
}

// What a candidate chosen under relaxed rules gives up of what was asked ("" if nothing).
inline std::string conv_relaxation_note(const ConvCandidate& c, const ConvRules& asked) {
  std::string s;
  if (asked.deterministic && !c.deterministic) s = "not deterministic";
  if (asked.strict_fp32 && c.tensor_cores) s += std::string(s.empty() ? "" : ", ") + "TF32 Tensor Cores";
  return s;
}

}  // namespace kernels

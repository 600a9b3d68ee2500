// Which of cuDNN's candidate algorithms a convolution may use under the run's rules (strict
// FP32, deterministic), why each other one was passed over, the order in which the rules
// are relaxed when nothing runs within them, the routes tried under each rule set, and the
// index arithmetic of the routes that copy (NCHW copies, one convolution per group). Plain
// C++ with no cuDNN types, so the CPU tests check the choice itself and the copies;
// kernels/cuda/conv.cu applies it to cuDNN's answers.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/hd.h"
#include "kernels/shapes.h"

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

// ---- routes ---------------------------------------------------------------------------------

// The routes one rule set tries for a shape, in order:
//   Nhwc:       the shape itself in our layout (cuDNN's heuristics, then its measured search);
//   NhwcPadded: ungrouped only, when C or K is not a multiple of 8: channels zero-padded to x8;
//   Nchw:       the shape on NCHW copies of the tensors (filters KCRS): cuDNN's older engines,
//               which offer FMA (non-TF32) FP32 algorithms where NHWC may offer only TF32;
//   PerGroup:   grouped only, and only when `last_resort` (the loosest rule set, nothing left to
//               relax): one ungrouped convolution per group on packed copies of the group's
//               channels, each through the routes above. Slow (depthwise = C convolutions), so
//               determinism and strict FP32 are given up before it is taken.
enum class ConvPath { Nhwc, NhwcPadded, Nchw, PerGroup };

inline std::vector<ConvPath> conv_paths(const ConvShape& d, bool last_resort) {
  std::vector<ConvPath> out{ConvPath::Nhwc};
  if (d.groups == 1 && (d.c % 8 != 0 || d.k % 8 != 0)) out.push_back(ConvPath::NhwcPadded);
  out.push_back(ConvPath::Nchw);
  if (d.groups > 1 && last_resort) out.push_back(ConvPath::PerGroup);
  return out;
}

// ---- NCHW copies -----------------------------------------------------------------------------

// A batched transpose [batch][rows][cols] -> [batch][cols][rows] (element copies, no arithmetic).
// source(i): the source index of destination element i, walked in destination order.
struct ConvTranspose {
  int64_t batch = 0, rows = 0, cols = 0;
  int64_t size() const { return batch * rows * cols; }
  ConvTranspose back() const { return ConvTranspose{batch, cols, rows}; }  // undoes this one
  ENGINE_HD int64_t source(int64_t i) const {
    const int64_t b = i / (cols * rows), in_b = i - b * cols * rows;
    const int64_t c = in_b / rows, r = in_b - c * rows;
    return (b * rows + r) * cols + c;
  }
};

// Our layouts to cuDNN's NCHW ones: x, y NHWC -> NCHW ([N][H*W][C] -> [N][C][H*W]); filters
// KRSC -> KCRS ([K][R*S][C/groups] -> [K][C/groups][R*S], cuDNN's NCHW filter layout). back()
// of each returns to ours (the output of each direction).
struct ConvNchwCopies {
  ConvTranspose x, w, y;
};
inline ConvNchwCopies conv_nchw_copies(const ConvShape& d) {
  return ConvNchwCopies{ConvTranspose{d.n, d.h * d.w, d.c}, ConvTranspose{d.k, d.r * d.s, d.group_c()},
                        ConvTranspose{d.n, d.out_h() * d.out_w(), d.k}};
}

// ---- one convolution per group ---------------------------------------------------------------

// One group's part of a buffer, in elements: `rows` runs of `width` elements, `pitch` apart,
// the first at `offset`. Packed, the part is [rows][width].
struct ConvSlice {
  int64_t offset = 0, pitch = 0, width = 0, rows = 0;
  int64_t size() const { return rows * width; }
  // Inside a buffer of `full` elements (checked before any copy: a wrong slice fails, never
  // writes out of bounds).
  bool fits(int64_t full) const {
    return offset >= 0 && width <= pitch && rows >= 1 && offset + (rows - 1) * pitch + width <= full;
  }
};

// Group g of a grouped convolution as an ungrouped one (`sub`: C/groups inputs, K/groups
// outputs) on packed copies of its slices: x's and y's channels [g*Cg, (g+1)*Cg) and
// [g*Kg, (g+1)*Kg) of every pixel; the filters' rows g*Kg .. (g+1)*Kg of [K, R, S, Cg], which
// are already contiguous (one run).
struct ConvGroupSlices {
  ConvShape sub;
  ConvSlice x, w, y;
};
inline ConvGroupSlices conv_group_slices(const ConvShape& d, int64_t g) {
  ConvShape sub = d;
  sub.c = d.group_c();
  sub.k = d.group_k();
  sub.groups = 1;
  const int64_t filters = sub.k * d.r * d.s * sub.c;  // one group's [Kg, R, S, Cg]
  return ConvGroupSlices{sub, ConvSlice{g * sub.c, d.c, sub.c, d.n * d.h * d.w},
                         ConvSlice{g * filters, filters, filters, 1},
                         ConvSlice{g * sub.k, d.k, sub.k, d.n * d.out_h() * d.out_w()}};
}

}  // namespace kernels

// 2-D convolutions on the GPU through cuDNN's convolution API, the twins of
// kernels/cpu/conv.h: activations NHWC, filters KRSC (cuDNN's NHWC filter layout is exactly
// [K, R, S, C]), cross-correlation, zero padding `pad` on all sides, square stride.
// T: float, kernels::half, kernels::bfloat16; arithmetic in FP32 (cuDNN compute type FLOAT),
// Tensor Cores for FP16/BF16, and for FP32 only when set_allow_tf32(true) (default off).
// Algorithms are chosen once per (direction, shape, dtype, TF32 flag) and cached;
// workspaces come from the caching allocator (MemKind::Workspace). Outputs are overwritten.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda/context.h"
#include "kernels/shapes.h"

namespace kernels::cuda {


// y[N,OH,OW,K] = conv(x, w) (+ bias[K] when non-null). The bias is added by a second kernel,
// so FP16/BF16 outputs with a bias are rounded twice (as PyTorch's cuDNN path does); the CPU
// twin rounds once.
template <class T>
void conv2d_forward(const ConvShape& d, const T* x, const T* w, const T* bias, T* y, cudaStream_t stream);
// gx[N,H,W,C] = the gradient with respect to the input.
template <class T> void conv2d_backward_data(const ConvShape& d, const T* gy, const T* w, T* gx, cudaStream_t stream);
// gw[K,R,S,C] = the gradient with respect to the filters; gbias[K] = column sums of gy (when
// non-null), summed in FP32 and rounded once.
template <class T>
void conv2d_backward_filter(const ConvShape& d, const T* x, const T* gy, T* gw, T* gbias, cudaStream_t stream);

// How an algorithm is chosen the first time a shape is seen (with set_deterministic(true),
// see context.h, only among cuDNN's deterministic algorithms):
//   Heuristic: cuDNN's heuristics (cudnnGet*Algorithm_v7), nothing is run to choose; the
//              default: cheap, and the same choice every run.
//   Benchmark: cudnnFind*AlgorithmEx times the candidates on the real buffers (like
//              torch.backends.cudnn.benchmark); the fastest usable one is kept.
// Either way candidates are tried in order until one runs: one cuDNN rejects for this
// configuration (a math type, a workspace above the limit) is skipped, never fatal.
// When none runs, fallbacks follow (kernels/conv_rules.h's conv_paths), each said once per
// shape on stderr and cached, so later calls go straight to it:
//   Measured: after heuristics, the measured search (cudnnFind) over every algorithm;
//   Padded:   ungrouped: input and output channels zero-padded to multiples of 8 (cuDNN's most
//             exercised Tensor Core case), the padded problem solved and the result sliced
//             back: the same sums, since the added channels are zeros;
//   Nchw:     the convolution with NCHW descriptors on transposed copies of its tensors, the
//             output transposed back: cuDNN's NCHW engines offer FMA (non-TF32) FP32
//             algorithms where NHWC may offer only TF32 ones;
// These are tried within the run's rules first; then:
//   Relaxed:  all of the above again with the rules loosened (kernels/conv_rules.h):
//             first without determinism (a grouped or depthwise backward-filter may have no
//             deterministic algorithm), then without strict FP32 (FP32 NHWC may be offered
//             only as TF32 Tensor Core engines). The one-line warning says what was given up.
//   PerGroup: grouped, under the loosest rules only (the last resort): one ungrouped
//             convolution per group (through the routes above) on packed copies of the
//             group's channels. Slow (depthwise: C convolutions and their copies).
// A cached fallback that refuses on a later call is forgotten and the routes tried again.
// Only when all fail does the call throw, saying how many candidates each filter removed and
// what each tried candidate answered.
enum class ConvAlgoSearch { Heuristic, Benchmark };
enum class ConvRoute { Search, Measured, Padded, Relaxed, Nchw, PerGroup };
void set_conv_algo_search(ConvAlgoSearch mode);
ConvAlgoSearch conv_algo_search();
void set_conv_workspace_limit(size_t bytes);  // default 1 GiB
size_t conv_workspace_limit();
size_t conv_algo_cache_size();
void clear_conv_algo_cache();
// One line per cached choice: direction, dtype (" tf32" after "f32" where TF32 was allowed),
// shape, "-> algo A (math)", then the workspace, the layout it ran in (nhwc, nchw) and the
// route; a fallback route's line names the algorithm, math and layout its inner convolution
// ran (no workspace: the inner line has it).
// (Also printed to stderr as they are made when the environment sets ENGINE_CUDNN_LOG=1.)
std::string conv_algo_report();
// The report's lines for one shape (every direction and dtype): tests read which math ran,
// e.g. "(fma)" for strict FP32.
std::vector<std::string> conv_report_lines(const ConvShape& d);
// Tests: start the choice at a later route, as if the earlier ones had found nothing (clear the
// cache around it): Measured skips the heuristics; Padded, Nchw and PerGroup start at that
// route for the shapes that have it (others take the usual order); Relaxed skips the rules as
// asked. Only the first rule set starts late. ConvRoute::Search restores the normal order.
void set_conv_first_route_for_test(ConvRoute route);

}  // namespace kernels::cuda

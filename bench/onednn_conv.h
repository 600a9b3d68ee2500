// The yardstick for bench_cpu_conv: one convolution pass through oneDNN (Debian's libdnnl-dev,
// linked into the benchmark only, as OpenBLAS is for bench_cpu_gemm). Activations NHWC, the
// weights in the format oneDNN picks for the primitive (reordered outside the timing, as a
// framework keeps them), data FP32 or BF16 (FP32 bias and BF16 diff weights for BF16).
#pragma once

#include <string>

#include "kernels/shapes.h"

namespace bench {

enum class ConvPass { Forward, BackwardData, BackwardFilter };

struct OnednnTiming {
  double seconds = 0;  // median of the timed runs
  std::string impl;    // the kernel oneDNN chose (impl_info_str), e.g. brgconv:avx512_core_amx_bf16
};

// Throws std::exception (oneDNN's error) when the primitive cannot be created.
OnednnTiming onednn_conv(const kernels::ConvShape& shape, ConvPass pass, bool bf16, int reps);

}  // namespace bench

// The differentiable ops. Each checks its inputs (naming the op, shapes and dtypes),
// runs the kernel for the tensors' device, and, when a tape is recording and an input
// needs a gradient, records its backward, written right beside its forward.
#pragma once

#include <cstdint>

#include "engine/tape.h"
#include "kernels/augment_math.h"
#include "engine/tensor.h"

namespace engine {

// x [N,H,W,C], w [K,R,S,C/groups], bias [K] or undefined -> [N,OH,OW,K]. Same dtype throughout.
// groups > 1 splits C and K into that many independent convolutions (groups = C = K: depthwise).
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride = 1, int64_t pad = 0,
              int64_t groups = 1);
// x [N,in], w [out,in] (PyTorch's layout), bias [out] or undefined -> [N,out].
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias);
// relu(conv2d(...)) and relu(linear(...)) as one op: on the CPU the ReLU is applied in the
// kernels' store (one pass less over the output, forward; backward masks gy by the output), on
// CUDA these are the two ops. Sequential uses them when numerics hooks are off.
Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride = 1, int64_t pad = 0,
                   int64_t groups = 1);
Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& bias);

Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x);  // exact erf form
// 1 / (1 + e^-x) and x * sigmoid(x) (SiLU, "swish"): computed in FP32 (FP64 for FP64 input),
// stored in the input's dtype; backward reads the saved input.
Tensor sigmoid(const Tensor& x);
Tensor silu(const Tensor& x);
Tensor add(const Tensor& a, const Tensor& b);  // same shape (the residual add)
Tensor scale(const Tensor& x, double s);
Tensor cast(const Tensor& x, DType dtype);     // backward casts the gradient back
// Inverted dropout: zeroes with probability p, scales the rest by 1/(1-p). The mask is
// Philox(seed, stream, first + index): recomputed in backward, identical on CPU and GPU; `first`
// places x in a larger batch (a data-parallel shard draws what one process would).
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t first = 0);

Tensor reshape(const Tensor& x, const Shape& shape);  // a view; backward reshapes back
Tensor flatten(const Tensor& x);                      // [N, ...] -> [N, rest]

// x [N,H,W,C]; windows that overhang by at most pad; ties go to the first maximum.
Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t pad = 0);
Tensor global_avg_pool(const Tensor& x);  // [N,H,W,C] -> [N,C]
// Squeeze-and-excitation's rescale: x [N,H,W,C] times gate [N,C] (or [N,1,1,C]) broadcast over
// H and W; same dtype. The gate's gradient sums over positions in FP32 (FP64 for FP64).
Tensor channel_gate(const Tensor& x, const Tensor& gate);

// x [N,H,W,C] (or [N,C]) in any float dtype; gamma, beta and the running statistics are
// FP32 (FP64 for FP64 x). Training uses batch statistics and updates the running ones.
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);

// Cross-entropy of logits [N,K] (any float dtype) against I32 labels [N], with label
// smoothing, averaged (Mean) or summed (Sum: airbench's; the gradient then does not shrink with
// the batch) over the rows; computed in FP32 (FP64 for FP64 logits) and returned as a 1-element
// FP32/FP64 tensor.
enum class Reduction { Mean, Sum };
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing = 0.0,
                     Reduction reduction = Reduction::Mean);

// Sum of all elements in the accumulation type (FP32 or FP64), as a 1-element tensor.
Tensor sum(const Tensor& x);

// Builds a batch from the resident data set, not recorded: images u8 [N,H,W,C] and labels
// i32 [N] on the device, indices i32 [B] -> x [B,H,W,C] (its dtype: the compute dtype) and
// y i32 [B], both preallocated by the caller so a training step allocates nothing. With
// `augment`, crop/flip draws come from (seed, epoch, image index); then normalisation.
void make_batch(const Tensor& images, const Tensor& labels, const Tensor& indices, bool augment,
                const kernels::AugmentConfig& cfg, uint64_t seed, uint64_t epoch, Tensor& x, Tensor& y);

// dst += src in place, not recorded (gradient accumulation).
void add_into(Tensor& dst, const Tensor& src);

// Floating-point operations (2 per multiply-add) done by conv2d and linear, forward and
// backward, since the last reset: what benchmarks divide by time to get model FLOP/s.
int64_t gemm_flops();
void reset_gemm_flops();

// Shared argument checks, used by ops and modules.
void check_defined(const char* op, const Tensor& t, const char* what);
void check_float(const char* op, const Tensor& t, const char* what);
void check_same_dtype_device(const char* op, const Tensor& a, const Tensor& b);

}  // namespace engine

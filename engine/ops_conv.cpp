// conv2d and linear: the GEMM-shaped ops (compute dtype in, FP32 accumulation inside).
#include <atomic>

#include "engine/autocast.h"
#include "engine/ops.h"
#include "engine/ops_internal.h"

namespace engine {

namespace {
std::atomic<int64_t> g_gemm_flops{0};
// 2 * output pixels * output channels * taps * input channels: one GEMM's worth.
int64_t conv_flops(const kernels::ConvShape& sh) { return 2 * sh.n * sh.out_h() * sh.out_w() * sh.k * sh.patch(); }
}  // namespace

int64_t gemm_flops() { return g_gemm_flops.load(); }
void reset_gemm_flops() { g_gemm_flops = 0; }

namespace {

// conv2d, and conv2d + ReLU with the ReLU in the CPU kernels' store (relu: CPU only). Backward
// of the fused op masks gy where the output is 0 (y > 0 exactly where the pre-activation is),
// then runs conv2d's.
Tensor conv2d_impl(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, int64_t stride, int64_t pad,
                   int64_t groups, bool relu) {
  // Under autocast, inputs of another dtype are cast (a no-op for compute copies).
  const Tensor x = autocast_input("conv2d", x_in), w = autocast_input("conv2d", w_in),
               bias = autocast_input("conv2d", b_in);
  check_float("conv2d", x, "input");
  check_float("conv2d", w, "weight");
  check_same_dtype_device("conv2d", x, w);
  ENGINE_CHECK(x.ndim() == 4, "conv2d: input must be NHWC (4-D), got " << x.desc());
  ENGINE_CHECK(w.ndim() == 4, "conv2d: weight must be KRSC (4-D), got " << w.desc());
  ENGINE_CHECK(groups >= 1 && x.dim(3) % groups == 0 && w.dim(0) % groups == 0,
               "conv2d: " << groups << " groups do not divide input " << shape_str(x.shape()) << " and weight "
                          << shape_str(w.shape()));
  ENGINE_CHECK(w.dim(3) * groups == x.dim(3), "conv2d: input " << shape_str(x.shape()) << " has " << x.dim(3)
                                                               << " channels but weight " << shape_str(w.shape())
                                                               << " expects " << w.dim(3) * groups
                                                               << (groups > 1 ? " (" + std::to_string(groups) + " groups)" : std::string()));
  ENGINE_CHECK(stride >= 1 && pad >= 0, "conv2d: bad stride " << stride << " or padding " << pad);
  kernels::ConvShape sh{x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(0), w.dim(1), w.dim(2), stride, pad, groups};
  ENGINE_CHECK(x.dim(1) + 2 * pad >= w.dim(1) && x.dim(2) + 2 * pad >= w.dim(2),
               "conv2d: kernel " << w.dim(1) << "x" << w.dim(2) << " larger than padded input " << shape_str(x.shape()));
  if (bias.defined()) {
    check_same_dtype_device("conv2d", x, bias);
    ENGINE_CHECK(bias.shape() == Shape{w.dim(0)}, "conv2d: bias " << shape_str(bias.shape()) << " for "
                                                                   << w.dim(0) << " output channels");
  }
  Tensor y = Tensor::empty({sh.n, sh.out_h(), sh.out_w(), sh.k}, x.dtype(), x.device());
  g_gemm_flops += conv_flops(sh);
  const Device dev = op_device("conv2d", {&x, &w, &bias});
  if (relu) {
    ENGINE_CHECK(!dev.is_cuda(), "conv2d_impl: the fused ReLU is the CPU kernels'");
    ENGINE_CPU_KERNEL("conv2d+relu", x.dtype(), T,
                      K::conv2d_forward(sh, x.data<T>(), w.data<T>(), bias.defined() ? bias.data<T>() : nullptr,
                                        y.data<T>(), stream, kernels::Epilogue::Relu));
  } else {
    ENGINE_KERNEL("conv2d", dev, x.dtype(), T,
                  K::conv2d_forward(sh, x.data<T>(), w.data<T>(), bias.defined() ? bias.data<T>() : nullptr,
                                    y.data<T>(), stream));
  }
  if (should_record({&x, &w, &bias})) {
    active_tape()->record(relu ? "conv2d+relu" : "conv2d", {x, w, bias}, y, [x, w, bias, sh, dev, relu, y](const Tensor& gy_out) -> std::vector<Tensor> {
      Tensor gy = gy_out, gx, gw, gb;
      if (relu) {
        gy = like(y);
        ENGINE_CPU_KERNEL("relu backward", y.dtype(), T,
                          K::relu_backward(y.data<T>(), gy_out.data<T>(), gy.data<T>(), y.numel(), stream));
      }
      if (x.requires_grad()) {
        g_gemm_flops += conv_flops(sh);
        gx = like(x);
        ENGINE_KERNEL("conv2d backward data", dev, x.dtype(), T,
                      K::conv2d_backward_data(sh, gy.data<T>(), w.data<T>(), gx.data<T>(), stream));
      }
      if (w.requires_grad() || bias.requires_grad()) {
        g_gemm_flops += conv_flops(sh);
        gw = like(w);
        if (bias.defined()) gb = like(bias);
        ENGINE_KERNEL("conv2d backward filter", dev, x.dtype(), T,
                      K::conv2d_backward_filter(sh, x.data<T>(), gy.data<T>(), gw.data<T>(),
                                                gb.defined() ? gb.data<T>() : nullptr, stream));
      }
      return {gx, gw, gb};
    });
  }
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t pad, int64_t groups) {
  return conv2d_impl(x, w, bias, stride, pad, groups, false);
}

Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t pad, int64_t groups) {
  if (x.device().is_cuda()) return relu(conv2d(x, w, bias, stride, pad, groups));  // two ops there
  return conv2d_impl(x, w, bias, stride, pad, groups, true);
}

namespace {

// linear, and linear + ReLU with the ReLU in the CPU kernels' store (relu: CPU only), as conv2d.
Tensor linear_impl(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, bool relu) {
  const Tensor x = autocast_input("linear", x_in), w = autocast_input("linear", w_in),
               bias = autocast_input("linear", b_in);
  check_float("linear", x, "input");
  check_float("linear", w, "weight");
  check_same_dtype_device("linear", x, w);
  ENGINE_CHECK(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1),
               "linear: input " << shape_str(x.shape()) << " does not match weight " << shape_str(w.shape())
                                << " (expected [N," << (w.ndim() == 2 ? w.dim(1) : -1) << "] input and [out,in] weight)");
  if (bias.defined()) {
    check_same_dtype_device("linear", x, bias);
    ENGINE_CHECK(bias.shape() == Shape{w.dim(0)}, "linear: bias " << shape_str(bias.shape()) << " for "
                                                                   << w.dim(0) << " outputs");
  }
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  Tensor y = Tensor::empty({n, out}, x.dtype(), x.device());
  const int64_t flops = 2 * n * in * out;
  g_gemm_flops += flops;
  // On the GPU one cuBLASLt GEMM with the bias fused into its epilogue; on the CPU the 1x1
  // convolution kernels.
  const Device dev = op_device("linear", {&x, &w, &bias});
  if (relu) {
    ENGINE_CHECK(!dev.is_cuda(), "linear_impl: the fused ReLU is the CPU kernels'");
    ENGINE_CPU_KERNEL("linear+relu", x.dtype(), T,
                      K::linear_forward(n, in, out, x.data<T>(), w.data<T>(), bias.defined() ? bias.data<T>() : nullptr,
                                        y.data<T>(), kernels::Epilogue::Relu, stream));
  } else {
    ENGINE_KERNEL("linear", dev, x.dtype(), T,
                  K::linear_forward(n, in, out, x.data<T>(), w.data<T>(), bias.defined() ? bias.data<T>() : nullptr,
                                    y.data<T>(), kernels::Epilogue::None, stream));
  }
  if (should_record({&x, &w, &bias})) {
    const char* name = relu ? "linear+relu" : "linear";
    active_tape()->record(name, {x, w, bias}, y, [x, w, bias, n, in, out, flops, dev, relu, y](const Tensor& gy_out) -> std::vector<Tensor> {
      Tensor gy = gy_out, gx, gw, gb;
      if (relu) {
        gy = like(y);
        ENGINE_CPU_KERNEL("relu backward", y.dtype(), T,
                          K::relu_backward(y.data<T>(), gy_out.data<T>(), gy.data<T>(), y.numel(), stream));
      }
      if (x.requires_grad()) {
        g_gemm_flops += flops;
        gx = like(x);
        ENGINE_KERNEL("linear backward data", dev, x.dtype(), T,
                      K::linear_backward_data(n, in, out, gy.data<T>(), w.data<T>(), gx.data<T>(), stream));
      }
      if (w.requires_grad() || bias.requires_grad()) {
        g_gemm_flops += flops;
        gw = like(w);
        if (bias.defined()) gb = like(bias);
        ENGINE_KERNEL("linear backward weight", dev, x.dtype(), T,
                      K::linear_backward_weight(n, in, out, x.data<T>(), gy.data<T>(), gw.data<T>(),
                                                gb.defined() ? gb.data<T>() : nullptr, stream));
      }
      return {gx, gw, gb};
    });
  }
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) { return linear_impl(x, w, bias, false); }

Tensor linear_relu(const Tensor& x, const Tensor& w, const Tensor& bias) {
  if (x.device().is_cuda()) return relu(linear(x, w, bias));  // two ops there
  return linear_impl(x, w, bias, true);
}

}  // namespace engine

// Pooling and batch-norm (statistics and affine parameters in FP32 whatever the data dtype).
#include "engine/distributed.h"
#include "engine/ops.h"
#include "engine/ops_internal.h"

namespace engine {

Tensor max_pool2d(const Tensor& x, int64_t kernel, int64_t stride, int64_t pad) {
  check_float("max_pool2d", x, "input");
  ENGINE_CHECK(x.ndim() == 4, "max_pool2d: input must be NHWC (4-D), got " << x.desc());
  ENGINE_CHECK(kernel >= 1 && stride >= 1 && pad >= 0 && 2 * pad <= kernel,
               "max_pool2d: bad kernel " << kernel << ", stride " << stride << ", padding " << pad
                                         << " (padding must be at most half the kernel)");
  ENGINE_CHECK(kernel <= kernels::kMaxPoolKernel,
               "max_pool2d: kernel " << kernel << " over " << kernels::kMaxPoolKernel
                                     << " (each maximum's place in its window is saved in one byte)");
  ENGINE_CHECK(x.dim(1) + 2 * pad >= kernel && x.dim(2) + 2 * pad >= kernel,
               "max_pool2d: kernel " << kernel << " larger than padded input " << shape_str(x.shape()));
  kernels::PoolShape sh{x.dim(0), x.dim(1), x.dim(2), x.dim(3), kernel, stride, pad};
  Tensor y = Tensor::empty({sh.n, sh.out_h(), sh.out_w(), sh.c}, x.dtype(), x.device());
  Tensor argmax = Tensor::empty(y.shape(), DType::U8, x.device());  // r * kernel + q in its window
  const Device dev = op_device("max_pool2d", {&x});
  ENGINE_KERNEL("max_pool2d", dev, x.dtype(), T,
                K::max_pool2d_forward(sh, x.data<T>(), y.data<T>(), argmax.data<uint8_t>(), stream));
  if (should_record({&x})) {
    // Backward needs the argmax and x's shape, not x itself.
    active_tape()->record("max_pool2d", {x}, y, [shape = x.shape(), dt = x.dtype(), argmax, sh, dev](
                                                   const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx = Tensor::empty(shape, dt, dev);  // overwritten by both backends' kernels
      ENGINE_KERNEL("max_pool2d backward", dev, dt, T,
                    K::max_pool2d_backward(sh, gy.data<T>(), argmax.data<uint8_t>(), gx.data<T>(), stream));
      return {gx};
    });
  }
  return y;
}

Tensor channel_gate(const Tensor& x, const Tensor& gate) {
  check_float("channel_gate", x, "input");
  check_same_dtype_device("channel_gate", x, gate);
  ENGINE_CHECK(x.ndim() == 4, "channel_gate: input must be NHWC (4-D), got " << x.desc());
  const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), c = x.dim(3);
  ENGINE_CHECK(gate.numel() == n * c && gate.dim(0) == n && gate.dim(-1) == c,
               "channel_gate: gate must be [N, C] or [N, 1, 1, C] = [" << n << ", " << c << "], got " << gate.desc());
  Tensor y = like(x);
  const Device dev = op_device("channel_gate", {&x, &gate});
  ENGINE_KERNEL("channel_gate", dev, x.dtype(), T,
                K::channel_gate_forward(n, hw, c, x.data<T>(), gate.data<T>(), y.data<T>(), stream));
  if (should_record({&x, &gate})) {
    active_tape()->record("channel_gate", {x, gate}, y, [x, gate, n, hw, c, dev](const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx, gg;
      if (x.requires_grad()) {
        gx = like(x);
        ENGINE_KERNEL("channel_gate backward input", dev, x.dtype(), T,
                      K::channel_gate_forward(n, hw, c, gy.data<T>(), gate.data<T>(), gx.data<T>(), stream));
      }
      if (gate.requires_grad()) {
        gg = like(gate);
        ENGINE_KERNEL("channel_gate backward gate", dev, x.dtype(), T,
                      K::channel_gate_backward_gate(n, hw, c, x.data<T>(), gy.data<T>(), gg.data<T>(), stream));
      }
      return {gx, gg};
    });
  }
  return y;
}

Tensor global_avg_pool(const Tensor& x) {
  check_float("global_avg_pool", x, "input");
  ENGINE_CHECK(x.ndim() == 4, "global_avg_pool: input must be NHWC (4-D), got " << x.desc());
  const int64_t n = x.dim(0), hw = x.dim(1) * x.dim(2), c = x.dim(3);
  Tensor y = Tensor::empty({n, c}, x.dtype(), x.device());
  const Device dev = op_device("global_avg_pool", {&x});
  ENGINE_KERNEL("global_avg_pool", dev, x.dtype(), T,
                K::global_avg_pool_forward(n, hw, c, x.data<T>(), y.data<T>(), stream));
  if (should_record({&x})) {
    active_tape()->record("global_avg_pool", {x}, y, [shape = x.shape(), dt = x.dtype(), n, hw, c, dev](
                                                        const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx = Tensor::empty(shape, dt, dev);
      ENGINE_KERNEL("global_avg_pool backward", dev, dt, T,
                    K::global_avg_pool_backward(n, hw, c, gy.data<T>(), gx.data<T>(), stream));
      return {gx};
    });
  }
  return y;
}

namespace {

// Data-parallel --sync-bn: the batch statistics of every rank's rows together. Forward: column
// sums, summed across ranks; squared deviations from that global mean, summed; normalise.
// Backward: sum gy and sum gy * xhat summed across ranks give dx; dgamma and dbeta stay this
// rank's own sums, which the gradient reducer then adds up like any other gradient.
Tensor sync_batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                       Tensor& running_var, double momentum, double eps, int64_t rows, int64_t c, DType pd,
                       Device dev) {
  double total_rows = static_cast<double>(rows);
  dist::all_reduce_sum(&total_rows, 1, "sync-BN row count");
  Tensor sum = Tensor::empty({c}, pd, x.device(), MemKind::Activations);
  Tensor sq = Tensor::empty({c}, pd, x.device(), MemKind::Activations);
  Tensor mean = Tensor::empty({c}, pd, x.device(), MemKind::Activations);
  Tensor invstd = Tensor::empty({c}, pd, x.device(), MemKind::Activations);
  Tensor y = like(x);
  ENGINE_KERNEL("sync batch_norm", dev, x.dtype(), T, {
    using P = kernels::acc_t<T>;
    const P total = P(total_rows);
    K::batch_norm_sums<T, P>(rows, c, x.data<T>(), nullptr, total, sum.data<P>(), stream);
    dist::all_reduce_sum(sum, "sync-BN sums");
    K::batch_norm_sums<T, P>(rows, c, x.data<T>(), sum.data<P>(), total, sq.data<P>(), stream);
    dist::all_reduce_sum(sq, "sync-BN squared deviations");
    K::batch_norm_forward_from_sums<T, P>(rows, c, static_cast<int64_t>(total_rows), x.data<T>(), sum.data<P>(), sq.data<P>(), gamma.data<P>(),
                                          beta.data<P>(), P(eps), P(momentum), running_mean.data<P>(),
                                          running_var.data<P>(), mean.data<P>(), invstd.data<P>(), y.data<T>(),
                                          stream);
  });
  if (should_record({&x, &gamma, &beta})) {
    active_tape()->record("sync_batch_norm", {x, gamma, beta}, y,
                          [x, gamma, mean, invstd, rows, c, total_rows](const Tensor& gy) -> std::vector<Tensor> {
      Tensor sums = Tensor::empty({2 * c}, gamma.dtype(), x.device());
      Tensor gx = x.requires_grad() ? like(x) : Tensor();
      Tensor ggamma = like(gamma), gbeta = like(gamma);
      ENGINE_KERNEL("sync batch_norm backward sums", x.device(), x.dtype(), T, {
        using P = kernels::acc_t<T>;
        K::batch_norm_backward_sums<T, P>(rows, c, x.data<T>(), gy.data<T>(), mean.data<P>(), invstd.data<P>(),
                                          sums.data<P>(), stream);
      });
      gbeta.copy_from(sums.slice0(0, c));  // this rank's own: the reducer sums them
      ggamma.copy_from(sums.slice0(c, 2 * c));
      if (gx.defined()) {
        dist::all_reduce_sum(sums, "sync-BN gradient sums");
        ENGINE_KERNEL("sync batch_norm backward input", x.device(), x.dtype(), T, {
          using P = kernels::acc_t<T>;
          K::batch_norm_backward_input<T, P>(rows, c, P(total_rows), x.data<T>(), gy.data<T>(), gamma.data<P>(),
                                             mean.data<P>(), invstd.data<P>(), sums.data<P>(), gx.data<T>(), stream);
        });
      }
      return {gx, ggamma, gbeta};
    });
  }
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum, double eps) {
  check_float("batch_norm", x, "input");
  ENGINE_CHECK(x.ndim() == 4 || x.ndim() == 2, "batch_norm: input must be NHWC or [N,C], got " << x.desc());
  const int64_t c = x.dim(-1), rows = x.numel() / c;
  const DType pd = acc_dtype(x.dtype());
  for (const Tensor* p : {&gamma, &beta, const_cast<const Tensor*>(&running_mean), const_cast<const Tensor*>(&running_var)}) {
    check_float("batch_norm", *p, "parameter");
    ENGINE_CHECK(p->dtype() == pd && p->shape() == Shape{c} && p->device() == x.device(),
                 "batch_norm: parameters and statistics must be " << dtype_name(pd) << "[" << c << "] on "
                                                                  << x.device().str() << ", got " << p->desc());
  }
  ENGINE_CHECK(!training || rows > 1 || dist::sync_batch_norm(),
               "batch_norm: training needs more than one value per channel, got " << x.desc());
  if (training && dist::sync_batch_norm())
    return sync_batch_norm(x, gamma, beta, running_mean, running_var, momentum, eps, rows, c, acc_dtype(x.dtype()),
                           op_device("batch_norm", {&x, &gamma, &beta, &running_mean, &running_var}));
  Tensor y = like(x);
  Tensor mean = Tensor::empty({c}, pd, x.device(), MemKind::Activations);
  Tensor invstd = Tensor::empty({c}, pd, x.device(), MemKind::Activations);
  const Device dev = op_device("batch_norm", {&x, &gamma, &beta, &running_mean, &running_var});
  if (!training) mean.copy_from(running_mean);  // saved for backward (queued on the GPU: no wait)
  ENGINE_KERNEL("batch_norm", dev, x.dtype(), T, {
    using P = kernels::acc_t<T>;
    if (training) {
      K::batch_norm_forward_train<T, P>(rows, c, x.data<T>(), gamma.data<P>(), beta.data<P>(), P(eps), P(momentum),
                                        running_mean.data<P>(), running_var.data<P>(), mean.data<P>(),
                                        invstd.data<P>(), y.data<T>(), stream);
    } else {
      K::batch_norm_forward_eval<T, P>(rows, c, x.data<T>(), gamma.data<P>(), beta.data<P>(), P(eps),
                                       running_mean.data<P>(), running_var.data<P>(), invstd.data<P>(), y.data<T>(),
                                       stream);
    }
  });
  if (should_record({&x, &gamma, &beta})) {
    active_tape()->record("batch_norm", {x, gamma, beta}, y,
                          [x, gamma, mean, invstd, training, rows, c](const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx = x.requires_grad() ? like(x) : Tensor();
      Tensor ggamma = like(gamma), gbeta = like(gamma);
      ENGINE_KERNEL("batch_norm backward", x.device(), x.dtype(), T, {
        using P = kernels::acc_t<T>;
        K::batch_norm_backward<T, P>(rows, c, x.data<T>(), gy.data<T>(), gamma.data<P>(), mean.data<P>(),
                                     invstd.data<P>(), training, gx.defined() ? gx.data<T>() : nullptr,
                                     ggamma.data<P>(), gbeta.data<P>(), stream);
      });
      return {gx, ggamma, gbeta};
    });
  }
  return y;
}

}  // namespace engine

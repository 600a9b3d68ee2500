// Element-wise ops, shape ops, casts, dropout and sums: forward and backward side by side.
#include <type_traits>

#include "engine/ops.h"
#include "engine/ops_internal.h"
#include "kernels/cpu/elementwise.h"

#ifdef ENGINE_WITH_CUDA
#include "kernels/cuda/elementwise.h"
#endif

namespace engine {

namespace kc = kernels::cpu;
#ifdef ENGINE_WITH_CUDA
namespace kcu = kernels::cuda;
#endif

void check_defined(const char* op, const Tensor& t, const char* what) {
  ENGINE_CHECK(t.defined(), op << ": " << what << " is undefined");
}

void check_float(const char* op, const Tensor& t, const char* what) {
  check_defined(op, t, what);
  ENGINE_CHECK(is_floating(t.dtype()), op << ": " << what << " must be a floating tensor, got " << t.desc());
  ENGINE_CHECK(t.numel() > 0, op << ": " << what << " is empty " << t.desc());
}

void check_same_dtype_device(const char* op, const Tensor& a, const Tensor& b) {
  ENGINE_CHECK(a.dtype() == b.dtype(), op << ": dtype mismatch, " << a.desc() << " vs " << b.desc());
  ENGINE_CHECK(a.device() == b.device(), op << ": device mismatch, " << a.desc() << " vs " << b.desc());
}

Tensor relu(const Tensor& x) {
  check_float("relu", x, "input");
  Tensor y = like(x);
  ENGINE_ON_CUDA(x, ENGINE_DISPATCH_CUDA(x.dtype(), "relu", T,
                                        kcu::relu_forward(x.data<T>(), y.data<T>(), x.numel(), cuda_stream())))
  ENGINE_DISPATCH_FLOAT(x.dtype(), "relu", T, kc::relu_forward(x.data<T>(), y.data<T>(), x.numel()));
  if (should_record({&x})) {
    active_tape()->record("relu", {x}, y, [x](const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx = like(x);
      ENGINE_ON_CUDA(x, ENGINE_DISPATCH_CUDA(x.dtype(), "relu backward", T,
                                            kcu::relu_backward(x.data<T>(), gy.data<T>(), gx.data<T>(), x.numel(),
                                                               cuda_stream())))
      ENGINE_DISPATCH_FLOAT(x.dtype(), "relu backward", T,
                            kc::relu_backward(x.data<T>(), gy.data<T>(), gx.data<T>(), x.numel()));
      return {gx};
    });
  }
  return y;
}

Tensor gelu(const Tensor& x) {
  check_float("gelu", x, "input");
  Tensor y = like(x);
  ENGINE_ON_CUDA(x, ENGINE_DISPATCH_CUDA(x.dtype(), "gelu", T,
                                        kcu::gelu_forward(x.data<T>(), y.data<T>(), x.numel(), cuda_stream())))
  ENGINE_DISPATCH_FLOAT(x.dtype(), "gelu", T, kc::gelu_forward(x.data<T>(), y.data<T>(), x.numel()));
  if (should_record({&x})) {
    active_tape()->record("gelu", {x}, y, [x](const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx = like(x);
      ENGINE_ON_CUDA(x, ENGINE_DISPATCH_CUDA(x.dtype(), "gelu backward", T,
                                            kcu::gelu_backward(x.data<T>(), gy.data<T>(), gx.data<T>(), x.numel(),
                                                               cuda_stream())))
      ENGINE_DISPATCH_FLOAT(x.dtype(), "gelu backward", T,
                            kc::gelu_backward(x.data<T>(), gy.data<T>(), gx.data<T>(), x.numel()));
      return {gx};
    });
  }
  return y;
}

namespace {
Tensor add_raw(const Tensor& a, const Tensor& b) {
  Tensor y = like(a);
  ENGINE_ON_CUDA(a, ENGINE_DISPATCH_CUDA(a.dtype(), "add", T,
                                        kcu::add(a.data<T>(), b.data<T>(), y.data<T>(), a.numel(), cuda_stream())))
  ENGINE_DISPATCH_FLOAT(a.dtype(), "add", T, kc::add(a.data<T>(), b.data<T>(), y.data<T>(), a.numel()));
  return y;
}
Tensor scale_raw(const Tensor& x, double s) {
  Tensor y = like(x);
  ENGINE_ON_CUDA(x, ENGINE_DISPATCH_CUDA(x.dtype(), "scale", T,
                                        kcu::scale(x.data<T>(), s, y.data<T>(), x.numel(), cuda_stream())))
  ENGINE_DISPATCH_FLOAT(x.dtype(), "scale", T, kc::scale(x.data<T>(), s, y.data<T>(), x.numel()));
  return y;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  check_float("add", a, "first input");
  check_float("add", b, "second input");
  check_same_dtype_device("add", a, b);
  ENGINE_CHECK(a.shape() == b.shape(), "add: shape mismatch, " << shape_str(a.shape()) << " vs " << shape_str(b.shape()));
  Tensor y = add_raw(a, b);
  if (should_record({&a, &b})) {
    // d(a+b) passes the gradient to both sides unchanged; the tape never adds in place into it.
    active_tape()->record("add", {a, b}, y, [](const Tensor& gy) -> std::vector<Tensor> { return {gy, gy}; });
  }
  return y;
}

void add_into(Tensor& dst, const Tensor& src) {
  check_same_dtype_device("add_into", dst, src);
  ENGINE_CHECK(dst.shape() == src.shape(), "add_into: shape mismatch, " << dst.desc() << " vs " << src.desc());
  ENGINE_ON_CUDA(dst, ENGINE_DISPATCH_CUDA(dst.dtype(), "add_into", T,
                                          kcu::add(dst.data<T>(), src.data<T>(), dst.data<T>(), dst.numel(),
                                                   cuda_stream())))
  ENGINE_DISPATCH_FLOAT(dst.dtype(), "add_into", T,
                        kc::add(dst.data<T>(), src.data<T>(), dst.data<T>(), dst.numel()));
}

Tensor scale(const Tensor& x, double s) {
  check_float("scale", x, "input");
  Tensor y = scale_raw(x, s);
  if (should_record({&x})) {
    active_tape()->record("scale", {x}, y, [s](const Tensor& gy) -> std::vector<Tensor> { return {scale_raw(gy, s)}; });
  }
  return y;
}

namespace {
Tensor cast_raw(const Tensor& x, DType to) {
  Tensor y = Tensor::empty(x.shape(), to, x.device());
  ENGINE_DISPATCH_FLOAT(x.dtype(), "cast", From, {
    ENGINE_DISPATCH_FLOAT(to, "cast", To, {
      ENGINE_ON_CUDA(x, kcu::cast<From, To>(x.data<From>(), y.data<To>(), x.numel(), cuda_stream()))
      kc::cast(x.data<From>(), y.data<To>(), x.numel());
    });
  });
  return y;
}
}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  check_float("cast", x, "input");
  ENGINE_CHECK(is_floating(dtype), "cast: target dtype " << dtype_name(dtype) << " is not floating");
  if (dtype == x.dtype()) return x;
  Tensor y = cast_raw(x, dtype);
  if (should_record({&x})) {
    const DType from = x.dtype();
    active_tape()->record("cast", {x}, y, [from](const Tensor& gy) -> std::vector<Tensor> { return {cast_raw(gy, from)}; });
  }
  return y;
}

namespace {
Tensor dropout_raw(const Tensor& x, double p, uint64_t seed, uint64_t stream) {
  Tensor y = like(x);
  ENGINE_ON_CUDA(x, ENGINE_DISPATCH_CUDA(x.dtype(), "dropout", T,
                                        kcu::dropout(x.data<T>(), y.data<T>(), x.numel(), static_cast<float>(p), seed,
                                                     stream, cuda_stream())))
  ENGINE_DISPATCH_FLOAT(x.dtype(), "dropout", T,
                        kc::dropout(x.data<T>(), y.data<T>(), x.numel(), static_cast<float>(p), seed, stream));
  return y;
}
}  // namespace

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t stream) {
  check_float("dropout", x, "input");
  ENGINE_CHECK(p >= 0.0 && p < 1.0, "dropout: probability " << p << " is outside [0, 1)");
  Tensor y = dropout_raw(x, p, seed, stream);
  if (should_record({&x})) {
    // Same mask, same scale: the backward is the forward applied to the gradient.
    active_tape()->record("dropout", {x}, y, [p, seed, stream](const Tensor& gy) -> std::vector<Tensor> {
      return {dropout_raw(gy, p, seed, stream)};
    });
  }
  return y;
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined("reshape", x, "input");
  ENGINE_CHECK(shape_numel(shape) == x.numel(),
               "reshape: cannot reshape " << shape_str(x.shape()) << " to " << shape_str(shape));
  Tensor y = x.view(shape);
  if (should_record({&x})) {
    const Shape in_shape = x.shape();
    active_tape()->record("reshape", {x}, y, [in_shape](const Tensor& gy) -> std::vector<Tensor> {
      return {gy.view(in_shape)};
    });
  }
  return y;
}

Tensor flatten(const Tensor& x) {
  check_defined("flatten", x, "input");
  ENGINE_CHECK(x.ndim() >= 1, "flatten: needs a batch dimension, got " << x.desc());
  return reshape(x, {x.dim(0), x.dim(0) ? x.numel() / x.dim(0) : 0});
}

Tensor sum(const Tensor& x) {
  check_float("sum", x, "input");
  const DType ad = acc_dtype(x.dtype());
  Tensor y = Tensor::empty({1}, ad, x.device());
  ENGINE_ON_CUDA(x, ENGINE_DISPATCH_CUDA(x.dtype(), "sum", T,
                                        kcu::sum(x.data<T>(), x.numel(), y.data<kernels::acc_t<T>>(), cuda_stream())))
  ENGINE_DISPATCH_FLOAT(x.dtype(), "sum", T, {
    using A = kernels::acc_t<T>;
    A total = 0;
    const T* p = x.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) total += A(p[i]);
    *y.data<A>() = total;
  });
  if (should_record({&x})) {
    active_tape()->record("sum", {x}, y, [x](const Tensor& gy) -> std::vector<Tensor> {
      // Every input element gets the output's gradient; on CUDA read where it lies (no wait).
      Tensor gx = like(x);
      ENGINE_ON_CUDA(x, ENGINE_DISPATCH_CUDA(x.dtype(), "sum backward", T,
                                            kcu::fill_from_device(gx.data<T>(), gy.data<kernels::acc_t<T>>(),
                                                                  gx.numel(), cuda_stream())))
      gx.fill(gy.item());
      return {gx};
    });
  }
  return y;
}

}  // namespace engine

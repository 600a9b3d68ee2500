// Element-wise ops, shape ops, casts, dropout and sums: forward and backward side by side.
#include <type_traits>

#include "engine/autocast.h"
#include "engine/ops.h"
#include "engine/ops_internal.h"

namespace engine {

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
  const Device dev = op_device("relu", {&x});
  Tensor y = like(x);
  ENGINE_KERNEL("relu", dev, x.dtype(), T, K::relu_forward(x.data<T>(), y.data<T>(), x.numel(), stream));
  if (should_record({&x})) {
    // Backward reads the output, not the input: y > 0 exactly where x > 0, and y is what the
    // next layer keeps anyway, so the input (often a batch-norm's output) is freed after forward.
    active_tape()->record("relu", {x}, y, [y, dev](const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx = like(y);
      ENGINE_KERNEL("relu backward", dev, y.dtype(), T,
                    K::relu_backward(y.data<T>(), gy.data<T>(), gx.data<T>(), y.numel(), stream));
      return {gx};
    });
  }
  return y;
}

// A unary element-wise op from its formula struct (kernels/element_math.h): forward, and a
// backward that reads the saved input. GELU is one; a new element-wise op is another line.
template <class Op> Tensor unary_op(const char* name, const char* backward_name, const Tensor& x) {
  check_float(name, x, "input");
  const Device dev = op_device(name, {&x});
  Tensor y = like(x);
  ENGINE_KERNEL(name, dev, x.dtype(), T, K::unary_forward<Op>(x.data<T>(), y.data<T>(), x.numel(), stream));
  if (should_record({&x})) {
    active_tape()->record(name, {x}, y, [x, dev, backward_name](const Tensor& gy) -> std::vector<Tensor> {
      Tensor gx = like(x);
      ENGINE_KERNEL(backward_name, dev, x.dtype(), T,
                    K::unary_backward<Op>(x.data<T>(), gy.data<T>(), gx.data<T>(), x.numel(), stream));
      return {gx};
    });
  }
  return y;
}

Tensor gelu(const Tensor& x) { return unary_op<kernels::GeluOp>("gelu", "gelu backward", x); }
Tensor sigmoid(const Tensor& x) { return unary_op<kernels::SigmoidOp>("sigmoid", "sigmoid backward", x); }
Tensor silu(const Tensor& x) { return unary_op<kernels::SiluOp>("silu", "silu backward", x); }

namespace {
Tensor add_raw(const Tensor& a, const Tensor& b) {
  Tensor y = like(a);
  ENGINE_KERNEL("add", op_device("add", {&a, &b}), a.dtype(), T,
                K::add(a.data<T>(), b.data<T>(), y.data<T>(), a.numel(), stream));
  return y;
}
Tensor scale_raw(const Tensor& x, double s) {
  Tensor y = like(x);
  ENGINE_KERNEL("scale", x.device(), x.dtype(), T, K::scale(x.data<T>(), s, y.data<T>(), x.numel(), stream));
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
  ENGINE_KERNEL("add_into", dst.device(), dst.dtype(), T,
                K::add(dst.data<T>(), src.data<T>(), dst.data<T>(), dst.numel(), stream));
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
  // Two dtypes: the kernel is chosen for the source, the target dispatched inside (every pair
  // of float types exists on both backends, FP64 included).
  ENGINE_KERNEL_ANY_FLOAT("cast", x.device(), x.dtype(), From, {
    ENGINE_DISPATCH_FLOAT(to, "cast", To, K::cast<From, To>(x.data<From>(), y.data<To>(), x.numel(), stream));
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
Tensor dropout_raw(const Tensor& x, double p, uint64_t seed, uint64_t rng_stream, uint64_t first) {
  Tensor y = like(x);
  ENGINE_KERNEL("dropout", x.device(), x.dtype(), T,
                K::dropout(x.data<T>(), y.data<T>(), x.numel(), static_cast<float>(p), seed, rng_stream, first, stream));
  return y;
}
}  // namespace

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t stream, uint64_t first) {
  check_float("dropout", x, "input");
  ENGINE_CHECK(p >= 0.0 && p < 1.0, "dropout: probability " << p << " is outside [0, 1)");
  Tensor y = dropout_raw(x, p, seed, stream, first);
  if (should_record({&x})) {
    // Same mask, same scale: the backward is the forward applied to the gradient.
    active_tape()->record("dropout", {x}, y, [p, seed, stream, first](const Tensor& gy) -> std::vector<Tensor> {
      return {dropout_raw(gy, p, seed, stream, first)};
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

Tensor sum(const Tensor& x_in) {
  const Tensor x = autocast_input("sum", x_in);  // FP32 under autocast
  check_float("sum", x, "input");
  const Device dev = op_device("sum", {&x});
  Tensor y = Tensor::empty({1}, acc_dtype(x.dtype()), dev);
  ENGINE_KERNEL("sum", dev, x.dtype(), T, K::sum(x.data<T>(), x.numel(), y.data<kernels::acc_t<T>>(), stream));
  if (should_record({&x})) {
    // Backward needs only the input's shape and dtype: keeping x itself would hold a whole
    // (possibly widened) activation alive until backward.
    const Shape shape = x.shape();
    const DType dt = x.dtype();
    active_tape()->record("sum", {x}, y, [shape, dt, dev](const Tensor& gy) -> std::vector<Tensor> {
      // Every input element gets the output's gradient, read where it lies (no host wait).
      Tensor gx = Tensor::empty(shape, dt, dev);
      ENGINE_KERNEL("sum backward", dev, dt, T,
                    K::fill_from_device(gx.data<T>(), gy.data<kernels::acc_t<T>>(), gx.numel(), stream));
      return {gx};
    });
  }
  return y;
}

}  // namespace engine

// Tensor construction, views, copies and element conversion for the CPU; device copies
// go through the CUDA backend when it is built.
#include "engine/tensor.h"

#include <cstring>
#include <sstream>

#include "engine/device.h"

namespace engine {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Storage::Storage(size_t nbytes, Device d, MemKind k) : bytes(nbytes), device(d), kind(k) {
  data = allocator_for(d).allocate(nbytes, k);
}

Storage::~Storage() { allocator_for(device).deallocate(data, bytes, kind); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  return empty(shape, dtype, device, current_mem_kind());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemKind kind) {
  for (int64_t d : shape) ENGINE_CHECK(d >= 0, "negative dimension in shape " << shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype),
                                            device, kind);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill(value);
  return t;
}

namespace {

// Writes v into element i of a CPU buffer of dtype t (one rounding for f16/bf16).
void store_as(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(p)[i] = v; break;
    case DType::F16: static_cast<half*>(p)[i] = kernels::half_from_double(v); break;
    case DType::BF16: static_cast<bfloat16*>(p)[i] = kernels::bfloat16_from_double(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DType::I32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DType::I8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
  }
}

double load_as(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(p)[i];
    case DType::F64: return static_cast<const double*>(p)[i];
    case DType::F16: return static_cast<float>(static_cast<const half*>(p)[i]);
    case DType::BF16: return static_cast<float>(static_cast<const bfloat16*>(p)[i]);
    case DType::U8: return static_cast<const uint8_t*>(p)[i];
    case DType::I32: return static_cast<const int32_t*>(p)[i];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::I8: return static_cast<const int8_t*>(p)[i];
  }
  return 0;
}

}  // namespace

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype) {
  ENGINE_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
               "from_vector: " << values.size() << " values for shape " << shape_str(shape));
  Tensor t = empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) store_as(t.raw(), dtype, static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::from_ints(const std::vector<int32_t>& values, const Shape& shape) {
  ENGINE_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
               "from_ints: " << values.size() << " values for shape " << shape_str(shape));
  Tensor t = empty(shape, DType::I32);
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

int64_t Tensor::dim(int i) const {
  const int n = ndim();
  const int j = i < 0 ? i + n : i;
  ENGINE_CHECK(j >= 0 && j < n, "dim " << i << " out of range for shape " << shape_str(shape()));
  return impl_->shape[j];
}

Tensor Tensor::view(const Shape& shape) const {
  ENGINE_CHECK(shape_numel(shape) == numel(),
               "view: cannot view " << shape_str(this->shape()) << " as " << shape_str(shape));
  auto impl = std::make_shared<TensorImpl>(*impl_);
  impl->shape = shape;
  impl->requires_grad = false;
  impl->from_op = false;
  impl->node = 0;
  impl->grad.reset();
  return Tensor(std::move(impl));
}

Tensor Tensor::slice0(int64_t begin, int64_t end) const {
  ENGINE_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= dim(0),
               "slice0: rows [" << begin << "," << end << ") of " << shape_str(shape()));
  Tensor v = view(shape());
  const int64_t row = numel() / (dim(0) ? dim(0) : 1);
  v.impl_->offset_bytes += static_cast<size_t>(begin * row) * dtype_size(dtype());
  v.impl_->shape[0] = end - begin;
  return v;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(Device d) const {
  Tensor t = empty(shape(), dtype(), d, mem_kind());
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  ENGINE_CHECK(src.shape() == shape() && src.dtype() == dtype(),
               "copy_from: " << src.desc() << " into " << desc());
  if (nbytes() == 0) return;
  if (device().is_cpu() && src.device().is_cpu()) {
    std::memcpy(raw(), src.raw(), nbytes());
  } else {
    device_copy(raw(), device(), src.raw(), src.device(), nbytes());
  }
}

void Tensor::fill(double value) {
  if (device().is_cuda()) {
    // A kernel for the float types (backward's seed is filled every step: no host wait);
    // a copy from the host for the rest (rare: counters at set-up).
    if (numel() == 0 || device_fill(raw(), device(), dtype(), value, numel())) return;
    Tensor host = full(shape(), value, dtype());
    copy_from(host);
    return;
  }
  const int64_t n = numel();
  if (n == 0) return;
  store_as(raw(), dtype(), 0, value);
  const size_t es = dtype_size(dtype());
  for (int64_t i = 1; i < n; ++i) std::memcpy(static_cast<char*>(raw()) + i * es, raw(), es);
}

void Tensor::zero() {
  if (device().is_cpu()) {
    if (nbytes()) std::memset(raw(), 0, nbytes());
  } else {
    device_memset_zero(raw(), device(), nbytes());
  }
}

std::vector<double> Tensor::to_vector() const {
  Tensor host = device().is_cpu() ? *this : to_cpu();
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[static_cast<size_t>(i)] = load_as(host.raw(), dtype(), i);
  return out;
}

double Tensor::item() const {
  ENGINE_CHECK(numel() == 1, "item: tensor " << desc() << " does not hold exactly one element");
  return to_vector()[0];
}

Tensor& Tensor::set_requires_grad(bool r) {
  ENGINE_CHECK(!r || is_floating(dtype()), "requires_grad on a non-floating tensor " << desc());
  impl_->requires_grad = r;
  return *this;
}

void Tensor::zero_grad() {
  if (impl_->grad) Tensor(impl_->grad).zero();
}

std::string Tensor::desc() const {
  if (!impl_) return "<undefined tensor>";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " " + device().str();
}

}  // namespace engine

// Tensor: a shape, a dtype and a device over shared storage. Contiguous (row-major),
// activations NHWC and conv filters KRSC by convention; views share storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/allocator.h"
#include "engine/dtype.h"

namespace engine {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// One allocation; freed through the allocator that made it, counted under its kind.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Device device;
  MemKind kind = MemKind::Activations;
  Storage(size_t nbytes, Device d, MemKind k);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset_bytes = 0;
  Shape shape;
  DType dtype = DType::F32;
  bool requires_grad = false;
  bool from_op = false;               // produced by a recorded op (not a leaf)
  uint64_t node = 0;                  // the recording that produced it (Tape::record), 0 for leaves
  std::shared_ptr<TensorImpl> grad;   // leaves only: accumulated by backward, kept until zeroed
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised memory; the kind defaults to the current MemKindScope.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor empty(const Shape& shape, DType dtype, Device device, MemKind kind);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype, Device device = Device::cpu());
  // Values converted (one rounding) to dtype; CPU tensor.
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype);
  static Tensor from_ints(const std::vector<int32_t>& values, const Shape& shape);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  int64_t dim(int i) const;  // negative counts from the end
  int ndim() const { return static_cast<int>(impl_->shape.size()); }
  int64_t numel() const { return shape_numel(impl_->shape); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }
  MemKind mem_kind() const { return impl_->storage->kind; }

  void* raw() const { return static_cast<char*>(impl_->storage->data) + impl_->offset_bytes; }
  template <class T> T* data() const {
    ENGINE_CHECK(dtype_of<T>::value == dtype(), "tensor holds " << dtype_name(dtype())
                                                  << ", accessed as " << dtype_name(dtype_of<T>::value));
    return static_cast<T*>(raw());
  }

  // Views sharing storage (not recorded on the tape; ops::reshape is the differentiable one).
  Tensor view(const Shape& shape) const;
  Tensor slice0(int64_t begin, int64_t end) const;  // rows [begin, end) of the first dim

  // Copies.
  Tensor clone() const;
  Tensor to(Device d) const;
  Tensor to_cpu() const { return to(Device::cpu()); }
  void copy_from(const Tensor& src);  // same shape and dtype; any devices
  void fill(double value);
  void zero();
  std::vector<double> to_vector() const;  // any dtype, any device, as doubles
  double item() const;                    // the one element of a 1-element tensor

  // Autograd.
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  Tensor& set_requires_grad(bool r = true);
  bool is_leaf() const { return !impl_->from_op; }
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  void zero_grad();  // zeroes the kept gradient in place (keeps its memory)

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& shared_impl() const { return impl_; }
  bool same_storage(const Tensor& o) const { return impl_->storage == o.impl_->storage; }
  std::string desc() const;  // "f16[256,32,32,3] cuda:0"

 private:
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace engine

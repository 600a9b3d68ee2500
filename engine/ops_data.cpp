// The batch op: gather, augment and normalise images from the resident uint8 data set.
#include "engine/ops.h"
#include "engine/ops_internal.h"

namespace engine {

void make_batch(const Tensor& images, const Tensor& labels, const Tensor& indices, bool augment,
                const kernels::AugmentConfig& cfg, uint64_t seed, uint64_t epoch, Tensor& x, Tensor& y) {
  ENGINE_CHECK(images.defined() && images.dtype() == DType::U8 && images.ndim() == 4,
               "make_batch: images must be u8 [N,H,W,C], got " << images.desc());
  ENGINE_CHECK(labels.defined() && labels.dtype() == DType::I32 && labels.shape() == Shape{images.dim(0)},
               "make_batch: labels must be i32[" << images.dim(0) << "], got " << labels.desc());
  ENGINE_CHECK(indices.defined() && indices.dtype() == DType::I32 && indices.ndim() == 1,
               "make_batch: indices must be i32 [B], got " << indices.desc());
  const int64_t b = indices.dim(0);
  const Shape xs{b, images.dim(1), images.dim(2), images.dim(3)};
  ENGINE_CHECK(x.defined() && x.shape() == xs && is_floating(x.dtype()),
               "make_batch: output must be a floating " << shape_str(xs) << " tensor, got " << x.desc());
  ENGINE_CHECK(y.defined() && y.dtype() == DType::I32 && y.shape() == Shape{b},
               "make_batch: label output must be i32[" << b << "], got " << y.desc());
  ENGINE_CHECK(cfg.pad >= 0 && cfg.pad < images.dim(1) && cfg.pad < images.dim(2), "make_batch: bad crop padding " << cfg.pad);
  ENGINE_CHECK(!cfg.fixed || (cfg.view.dy >= 0 && cfg.view.dy <= 2 * cfg.pad && cfg.view.dx >= 0 && cfg.view.dx <= 2 * cfg.pad),
               "make_batch: the fixed view's offset (" << cfg.view.dy << ", " << cfg.view.dx << ") is outside [0, "
                                                       << 2 * cfg.pad << "]");
  ENGINE_CHECK(images.dim(3) <= 3, "make_batch: at most 3 channels are normalised, got " << images.dim(3));
  ENGINE_CHECK(labels.device() == images.device() && indices.device() == images.device() &&
                   x.device() == images.device() && y.device() == images.device(),
               "make_batch: images, labels, indices and outputs must be on one device");
  const Device dev = op_device("make_batch", {&images, &labels, &indices, &x, &y});
  // On the GPU the indices are trusted (the trainer builds them): checking them would make
  // every step wait for the host. On the CPU they are checked.
  if (dev.is_cpu()) {
    const int32_t* idx = indices.data<int32_t>();
    for (int64_t i = 0; i < b; ++i)
      ENGINE_CHECK(idx[i] >= 0 && idx[i] < images.dim(0), "make_batch: index " << idx[i] << " outside the data set");
  }
  ENGINE_KERNEL("make_batch", dev, x.dtype(), T,
                K::make_batch(images.data<uint8_t>(), labels.data<int32_t>(), indices.data<int32_t>(), b,
                              static_cast<int>(images.dim(1)), static_cast<int>(images.dim(2)),
                              static_cast<int>(images.dim(3)), augment, cfg, seed, epoch, x.data<T>(),
                              y.data<int32_t>(), stream));
}

}  // namespace engine

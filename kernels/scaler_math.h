// The dynamic loss scaler's update rule (PyTorch GradScaler semantics), written once for the
// host (LossScaler on the CPU, scale in double) and the device (kernels/cuda/scaler.cu, float).
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace kernels {

struct ScalerRule {
  double growth = 2.0, backoff = 0.5, min_scale = 0.0;
  int64_t interval = 2000;
  bool dynamic = true;  // false: the scale stays put (static scaling, or the scaler disabled)
};

// What update() changes after each step.
template <class S> struct ScalerCounters {
  S scale;
  int64_t tracker;      // clean steps since the last change of scale
  int64_t skipped;      // steps skipped for inf/NaN, in all
  int64_t consecutive;  // ... in a row (the abort guard reads it)
};

// On overflow: skip counted, scale *= backoff (not below min_scale), tracker reset. Else: the
// run of skips ends, and after `interval` clean steps scale *= growth, unless that leaves the
// FP32 range (the scale is applied in FP32 on the device).
template <class S> ENGINE_HD void scaler_update_rule(ScalerCounters<S>& st, bool found_inf, const ScalerRule& r) {
  if (found_inf) {
    ++st.skipped;
    ++st.consecutive;
    if (!r.dynamic) return;
    const S backed = st.scale * static_cast<S>(r.backoff);
    // Written so a NaN scale also falls to the floor.
    st.scale = backed >= static_cast<S>(r.min_scale) ? backed : static_cast<S>(r.min_scale);
    st.tracker = 0;
    return;
  }
  st.consecutive = 0;
  if (!r.dynamic) return;
  if (++st.tracker == r.interval) {
    const S grown = st.scale * static_cast<S>(r.growth);
    if (grown <= static_cast<S>(3.4028234663852886e38)) st.scale = grown;  // FLT_MAX; false for inf and NaN
    st.tracker = 0;
  }
}

}  // namespace kernels

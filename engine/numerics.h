// Seeing the numbers: range statistics of tensors against FP16's edges (one device pass per
// tensor, read once per report), the hooks that let a report or anomaly mode watch every layer
// and op, and the name of the layer whose forward is running.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tensor.h"

namespace engine {

class Module;

// Shares of a tensor's elements in each FP16 bucket (kernels/range_math.h). `scale` is the loss
// scale its values carry: flush_unscaled counts what x / scale would lose to zero in FP16.
struct RangeStats {
  int64_t count = 0, zeros = 0, subnormal = 0, flush = 0, flush_unscaled = 0, near_overflow = 0, overflow = 0, inf = 0,
          nan = 0;
  double absmax = 0;  // largest finite |x|
  double share(int64_t k) const { return count ? static_cast<double>(k) / static_cast<double>(count) : 0.0; }
  bool finite() const { return inf == 0 && nan == 0; }
};

// One tensor, read at once (a host wait on the GPU): for tests and anomaly checks.
RangeStats range_stats(const Tensor& t, double scale = 1.0);

// Many tensors' statistics queued on the device into one buffer, read with one copy.
class RangeBatch {
 public:
  void add(const Tensor& t, double scale = 1.0);  // queues the pass; the tensor may be freed after
  std::vector<RangeStats> read();                 // the stats in add() order; empties the batch
  size_t size() const { return counts_.size(); }

 private:
  struct Chunk {
    Tensor buffer;  // RangeCounts slots, on the tensors' device
    int used = 0;
  };
  std::vector<Chunk> chunks_;
  std::vector<std::pair<size_t, int>> slots_;  // (chunk, slot) per add
  std::vector<int64_t> counts_;                // elements per add
};

// What watches the forward and backward passes while installed (NumericsScope); nothing is
// installed in a normal step, which then pays one pointer test per module call and op.
struct NumericsHooks {
  // Display names of the model's modules ("conv1", "1.0.body.3"); ops name their layer by them.
  std::unordered_map<const Module*, std::string> names;
  // After each named module's forward, with its output (the range report collects here).
  std::function<void(const Module&, const std::string& name, const Tensor& output)> on_layer_output;
  // Anomaly mode: every recorded op's output and every gradient backward produces is checked
  // for inf/NaN (a host read each). The first one throws engine::Error naming the op, the layer,
  // the direction, dtype and shape, `step` and `loss_scale`. With `scaler_on` and not `strict`,
  // a backward overflow is the scaler's business: one note on stderr, no error.
  bool anomaly = false, strict = false, scaler_on = false;
  int64_t step = 0;
  double loss_scale = 1.0;
  bool noted_this_step = false;  // the scaler note was printed; stop checking this backward
};

NumericsHooks* numerics_hooks();  // the installed hooks, or nullptr

class NumericsScope {
 public:
  explicit NumericsScope(NumericsHooks& hooks);
  ~NumericsScope();
  NumericsScope(const NumericsScope&) = delete;
  NumericsScope& operator=(const NumericsScope&) = delete;

 private:
  NumericsHooks* saved_;
};

// The innermost named module whose forward is running, or nullptr (set by Module::operator()
// while hooks are installed).
const std::string* current_layer();
class CurrentLayerScope {
 public:
  explicit CurrentLayerScope(const std::string* name);
  ~CurrentLayerScope();
  CurrentLayerScope(const CurrentLayerScope&) = delete;
  CurrentLayerScope& operator=(const CurrentLayerScope&) = delete;

 private:
  const std::string* saved_;
};

// Anomaly checks (no-ops unless hooks with anomaly are installed): `what` is "forward" or
// "backward"; throws, or notes, as NumericsHooks says.
void check_anomaly(const char* op, const std::string* layer, const char* what, const Tensor& t);

}  // namespace engine

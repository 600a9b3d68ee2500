// Range statistics, the numerics hooks and anomaly checks (see numerics.h).
#include "engine/numerics.h"

#include <cstdio>
#include <cstring>
#include <sstream>

#include "engine/ops_internal.h"

namespace engine {

namespace {

constexpr int kSlotsPerChunk = 64;
thread_local NumericsHooks* g_hooks = nullptr;
thread_local const std::string* g_layer = nullptr;

// The pass itself, into slot `out` (memory on t's device).
void queue_range_stats(const Tensor& t, double scale, kernels::RangeCounts* out) {
  ENGINE_CHECK(is_floating(t.dtype()), "range statistics: " << t.desc() << " is not floating");
  const Device dev = t.device();
  const int64_t n = t.numel();
  ENGINE_KERNEL_ANY_FLOAT("range_stats", dev, t.dtype(), T, K::range_stats(t.data<T>(), n, scale, out, stream));
}

RangeStats to_stats(const kernels::RangeCounts& c, int64_t count) {
  RangeStats s;
  s.count = count;
  s.zeros = static_cast<int64_t>(c.count[kernels::kRangeZero]);
  s.subnormal = static_cast<int64_t>(c.count[kernels::kRangeSubnormal]);
  s.flush = static_cast<int64_t>(c.count[kernels::kRangeFlush]);
  s.flush_unscaled = static_cast<int64_t>(c.count[kernels::kRangeFlushUnscaled]);
  s.near_overflow = static_cast<int64_t>(c.count[kernels::kRangeNearOverflow]);
  s.overflow = static_cast<int64_t>(c.count[kernels::kRangeOverflow]);
  s.inf = static_cast<int64_t>(c.count[kernels::kRangeInf]);
  s.nan = static_cast<int64_t>(c.count[kernels::kRangeNan]);
  float absmax;
  std::memcpy(&absmax, &c.absmax_bits, sizeof absmax);
  s.absmax = absmax;
  return s;
}

}  // namespace

RangeStats range_stats(const Tensor& t, double scale) {
  RangeBatch batch;
  batch.add(t, scale);
  return batch.read().at(0);
}

void RangeBatch::add(const Tensor& t, double scale) {
  const Device dev = t.device();
  if (chunks_.empty() || chunks_.back().used == kSlotsPerChunk || chunks_.back().buffer.device() != dev) {
    Chunk c;
    c.buffer = Tensor::empty({static_cast<int64_t>(kSlotsPerChunk * sizeof(kernels::RangeCounts))}, DType::U8, dev,
                             MemKind::Workspace);
    chunks_.push_back(std::move(c));
  }
  Chunk& c = chunks_.back();
  auto* slot = static_cast<kernels::RangeCounts*>(c.buffer.raw()) + c.used;
  queue_range_stats(t, scale, slot);
  slots_.emplace_back(chunks_.size() - 1, c.used++);
  counts_.push_back(t.numel());
}

std::vector<RangeStats> RangeBatch::read() {
  std::vector<Tensor> host;
  for (const Chunk& c : chunks_) host.push_back(c.buffer.device().is_cpu() ? c.buffer : c.buffer.to_cpu());
  std::vector<RangeStats> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const auto* slots = static_cast<const kernels::RangeCounts*>(host[slots_[i].first].raw());
    out.push_back(to_stats(slots[slots_[i].second], counts_[i]));
  }
  chunks_.clear();
  slots_.clear();
  counts_.clear();
  return out;
}

NumericsHooks* numerics_hooks() { return g_hooks; }
NumericsScope::NumericsScope(NumericsHooks& hooks) : saved_(g_hooks) { g_hooks = &hooks; }
NumericsScope::~NumericsScope() { g_hooks = saved_; }

const std::string* current_layer() { return g_layer; }
CurrentLayerScope::CurrentLayerScope(const std::string* name) : saved_(g_layer) { g_layer = name; }
CurrentLayerScope::~CurrentLayerScope() { g_layer = saved_; }

void check_anomaly(const char* op, const std::string* layer, const char* what, const Tensor& t) {
  NumericsHooks* h = g_hooks;
  if (!h || !h->anomaly || !t.defined() || !is_floating(t.dtype())) return;
  const bool backward = std::strcmp(what, "backward") == 0;
  if (backward && h->noted_this_step) return;
  const RangeStats s = range_stats(t);
  if (s.finite()) return;
  std::ostringstream where;
  where << "step " << h->step << ": " << op << " " << what << " in layer " << (layer ? *layer : std::string("(outside the model)"))
        << " produced " << s.nan << " NaN and " << s.inf << " inf of " << s.count << " values (" << t.desc()
        << "), loss scale " << h->loss_scale;
  if (backward && h->scaler_on && !h->strict) {
    std::fprintf(stderr,
                 "note: anomaly mode: %s; the loss scaler skips this step and lowers the scale "
                 "(--detect-anomaly=strict makes this an error)\n",
                 where.str().c_str());
    h->noted_this_step = true;
    return;
  }
  ENGINE_FAIL("anomaly: " << where.str());
}

}  // namespace engine

// trainer: trains a CNN on CIFAR-10 (or a built-in synthetic stand-in) in FP32, FP16 or
// BF16 with FP32 master weights and dynamic loss scaling; reports accuracy, speed and
// memory by kind; saves and resumes checkpoints. `trainer --help` lists every flag.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "data/cifar.h"
#include "engine/amp.h"
#include "engine/checkpoint.h"
#include "engine/device.h"
#include "engine/distributed.h"
#include "engine/random.h"
#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/philox.h"
#include "models/cli.h"
#include "models/int8_net.h"
#include "models/models.h"
#include "models/pytorch_weights.h"
#include "models/stop_signals.h"
#include "models/trainer_args.h"
#include "models/train_step.h"
#include "models/tta.h"
#include "models/whitening.h"

namespace {

using engine::DType;
using engine::Tensor;

using Config = models::TrainerConfig;

[[noreturn]] void usage_error(const std::string& msg) { throw models::UsageError(msg); }

DType precision_dtype(const std::string& p) {
  return p == "fp32" ? DType::F32 : p == "fp16" ? DType::F16 : DType::BF16;
}

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

// A permutation of [0, n) for one epoch: Fisher-Yates driven by Philox(seed, epoch).
std::vector<int32_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
  constexpr uint64_t kShuffleStream = 0x5A0FF1E000000000ull;
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t r = (static_cast<uint64_t>(kernels::philox_u32(seed, kShuffleStream + epoch, 2 * i)) << 32) |
                       kernels::philox_u32(seed, kShuffleStream + epoch, 2 * i + 1);
    std::swap(order[i], order[r % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

struct Split {
  Tensor images, labels;  // resident on the device: u8 [N,32,32,3], i32 [N]
  int64_t size() const { return images.defined() ? images.dim(0) : 0; }
};

Split upload(const data::Dataset& d, engine::Device device) {
  engine::MemKindScope kind(engine::MemKind::Data);
  Tensor images = Tensor::empty({d.size(), data::Dataset::kH, data::Dataset::kW, data::Dataset::kC}, DType::U8);
  if (d.size()) std::memcpy(images.raw(), d.images.data(), d.images.size());
  Tensor labels = Tensor::from_ints(d.labels, {d.size()});
  if (device.is_cpu()) return {images, labels};
  return {images.to(device), labels.to(device)};
}

struct EvalResult { double loss = 0, accuracy = 0; };

// Test loss and accuracy with the model in eval mode, with activations in `dtype`. Across
// ranks each takes its share of the test set (of batch / ranks images at a time), with rank
// 0's batch-norm statistics (as DDP), and the sums are added.
// With `tta`, each batch's logits are models/tta.h's weighted mean over its views.
EvalResult evaluate(engine::Module& model, const Split& split, DType dtype, int64_t batch, engine::Device device,
                    const kernels::AugmentConfig& norm, bool tta = false) {
  namespace dist = engine::dist;
  dist::broadcast_buffers(model);
  engine::NoGradScope no_grad;
  engine::AutocastScope autocast(dtype);
  model.eval();
  const std::vector<models::TtaView> views = tta ? models::tta_views(norm) : std::vector<models::TtaView>{};
  double loss_sum = 0;
  int64_t correct = 0;
  const int64_t ranks = dist::world().size, rank = dist::world().rank;
  const int64_t lo = split.size() * rank / ranks, hi = split.size() * (rank + 1) / ranks;
  batch = std::max<int64_t>(1, batch / ranks);
  for (int64_t begin = lo; begin < hi; begin += batch) {
    const int64_t b = std::min(batch, hi - begin);
    std::vector<int32_t> idx(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[i] = static_cast<int32_t>(begin + i);
    Tensor indices = Tensor::from_ints(idx, {b});
    if (device.is_cuda()) indices = indices.to(device);
    Tensor x = Tensor::empty({b, 32, 32, 3}, dtype, device), y = Tensor::empty({b}, DType::I32, device);
    Tensor logits;
    if (tta) {
      logits = models::tta_logits(model, views, split.images, split.labels, indices, x, y);
    } else {
      engine::make_batch(split.images, split.labels, indices, false, norm, 0, 0, x, y);
      logits = model(x);
    }
    loss_sum += engine::cross_entropy(logits, y).item() * static_cast<double>(b);
    const std::vector<double> z = logits.to_vector();
    const std::vector<double> labels = y.to_vector();
    const int64_t k = logits.dim(1);
    for (int64_t i = 0; i < b; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < k; ++j)
        if (z[i * k + j] > z[i * k + best]) best = j;
      correct += best == static_cast<int64_t>(labels[i]);
    }
  }
  model.train();
  double sums[2] = {loss_sum, static_cast<double>(correct)};
  dist::all_reduce_sum(sums, 2, "evaluation sums");
  const double n = static_cast<double>(std::max<int64_t>(1, split.size()));
  return {sums[0] / n, 100.0 * sums[1] / n};
}

// JSON-lines metrics log (one object per line) for plotting.
class JsonLog {
 public:
  explicit JsonLog(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::app);
    ENGINE_CHECK(out_, "cannot open log file " << path);
  }
  void write(const std::string& kind, const std::vector<std::pair<std::string, double>>& fields,
             const std::vector<std::pair<std::string, std::string>>& strings = {}) {
    if (!out_.is_open()) return;
    out_ << "{\"event\":\"" << kind << "\"";
    for (auto& [k, v] : strings) out_ << ",\"" << k << "\":\"" << v << "\"";
    char buf[64];
    for (auto& [k, v] : fields) {
      std::snprintf(buf, sizeof buf, "%.9g", v);
      out_ << ",\"" << k << "\":" << (std::isfinite(v) ? buf : "null");
    }
    out_ << "}\n";
    out_.flush();
  }

 private:
  std::ofstream out_;
};

std::string default_data_dir() {
#ifdef ENGINE_SOURCE_DIR
  return std::string(ENGINE_SOURCE_DIR) + "/data/cifar10";
#else
  return "data/cifar10";
#endif
}

// Micro-batches of `batch` images in an epoch of n: a last one smaller than the number of ranks
// would leave a rank without images, so it is dropped (and any smaller one with --drop-last).
int64_t micro_batches_per_epoch(int64_t n, int64_t batch, int64_t ranks, bool drop_last) {
  return n / batch + (!drop_last && n % batch >= ranks ? 1 : 0);
}

// The learning rate at optimizer step `step` of `total` (models/train_step.h lr_factor).
double lr_at(const Config& cfg, int64_t step, int64_t total) {
  return cfg.lr * models::lr_factor(cfg.lr_schedule, step, total, cfg.warmup, cfg.lr_start, cfg.lr_end);
}

// The augmentation the flags ask for, on the model's normalisation.
kernels::AugmentConfig train_augment(const Config& cfg) {
  kernels::AugmentConfig a = models::input_normalisation(cfg.model);
  a.pad = static_cast<int>(cfg.crop_pad);
  a.reflect = cfg.pad_mode == "reflect";
  a.flip = cfg.flip == "alternating" ? kernels::FlipMode::Alternating
           : cfg.flip == "random"    ? kernels::FlipMode::Random
                                     : kernels::FlipMode::None;
  return a;
}

// ---- one training step: models/train_step.h (PyTorch's AMP loop, split at the micro-batch) ----

// ---- data --------------------------------------------------------------------------------
struct Data {
  Split train, test;
  std::vector<std::string> class_names;
  std::string source;
};

// with_train sees the host copy of the training set and the number of classes before the set is
// uploaded (what the model is built and its whitening layer computed from).
Data load_data(const Config& cfg, engine::Device device,
               const std::function<void(const data::Dataset&, int)>& with_train = nullptr) {
  const std::string root = cfg.data.empty() ? default_data_dir() : cfg.data;
  data::CifarSplits splits;
  std::vector<std::string> class_names = data::cifar10_class_names();
  if (cfg.synthetic || data::find_cifar10(root).kind == data::CifarLocation::Kind::kNone) {
    ENGINE_CHECK(cfg.synthetic || cfg.data.empty(),
                 "no CIFAR-10 found in " << root
                                         << " (expected data_batch_1..5.bin + test_batch.bin, or train/ and test/ folders)");
    if (!cfg.synthetic)
      std::fprintf(stderr,
                   "notice: no CIFAR-10 in %s; training on the built-in synthetic data set instead (%lld train, %lld "
                   "test images). Get the real data with data/get_cifar10.sh.\n",
                   root.c_str(), static_cast<long long>(cfg.synthetic_size),
                   static_cast<long long>(std::max<int64_t>(10, cfg.synthetic_size / 5)));
    splits = data::synthetic_cifar(cfg.synthetic_size, std::max<int64_t>(10, cfg.synthetic_size / 5), 1234);
    class_names = data::synthetic_class_names();
  } else {
    splits = data::load_cifar10(root, cfg.cache, true);
  }
  if (cfg.subset > 0) splits.train = data::subset(splits.train, cfg.subset);
  if (cfg.test_subset > 0) splits.test = data::subset(splits.test, cfg.test_subset);
  ENGINE_CHECK(splits.train.size() > 0, "the training set is empty");
  if (with_train) with_train(splits.train, static_cast<int>(class_names.size()));
  return {upload(splits.train, device), upload(splits.test, device), class_names, splits.source};
}

// ---- model, optimizer, scaler, and their checkpoints ---------------------------------------
struct Training {
  std::shared_ptr<engine::Module> model;
  std::vector<models::NamedLayer> layers;   // display names (the report's, --fp32-layers')
  engine::NumericsHooks hooks;              // installed on inspected steps and in anomaly mode
  std::unique_ptr<engine::Optimizer> opt;
  std::unique_ptr<engine::LossScaler> scaler;
  std::unique_ptr<engine::dist::GradReducer> reducer;  // data-parallel runs only
  std::unique_ptr<engine::WeightAverage> average;     // --ema
  std::vector<std::pair<engine::ParamPtr, double>> freeze_after;  // --freeze-after: parameter, epochs
  int64_t step = 0;  // optimizer steps taken, skipped ones included
  // The last checkpoint written: a stop right after a save does not write the same step again.
  mutable int64_t saved_step = -1;
  mutable std::string saved_path;
};

Training make_training(const Config& cfg, int classes, engine::Device device, DType compute) {
  Training t;
  t.model = models::make_model(cfg.model, classes, {cfg.dirac, cfg.whiten});
  if (cfg.model == "airbench94" && !cfg.whiten) std::fprintf(stderr, "--no-whiten: the first layer learns from its default init\n");
  t.layers = models::named_layers(*t.model, cfg.model);
  for (const auto& l : t.layers) t.hooks.names[l.module] = l.name;
  for (const std::string& name : cfg.fp32_layers) {
    auto it = std::find_if(t.layers.begin(), t.layers.end(), [&](const auto& l) { return l.name == name; });
    if (it == t.layers.end()) {
      std::string valid;
      for (const auto& l : t.layers)
        if (l.leaf) valid += (valid.empty() ? "" : ", ") + l.name;
      usage_error("--fp32-layers: " + cfg.model + " has no layer '" + name + "' (its layers: " + valid + ")");
    }
    it->module->set_fp32_region();
  }
  t.model->set_compute_dtype(compute);
  t.model->to(device);
  if (cfg.optimizer == "sgd")
    t.opt = std::make_unique<engine::SGD>(t.model->parameters(), cfg.lr, cfg.momentum, cfg.weight_decay, cfg.nesterov);
  else
    t.opt = std::make_unique<engine::Adam>(t.model->parameters(), cfg.lr, 0.9, 0.999, 1e-8, cfg.weight_decay,
                                           cfg.optimizer == "adamw");
  t.opt->set_state_format(engine::parse_state_format(cfg.optimizer_state));
  // The batch-norm parameters' group (--norm-lr-scale, --norm-weight-decay).
  if (cfg.norm_lr_scale != 1.0 || cfg.norm_weight_decay >= 0) {
    std::vector<engine::ParamPtr> norm;
    for (auto& [path, m] : t.model->named_modules())
      if (auto* bn = dynamic_cast<engine::BatchNorm2d*>(m)) norm.insert(norm.end(), {bn->gamma, bn->beta});
    t.opt->set_param_group(norm, cfg.norm_lr_scale, cfg.norm_weight_decay);
  }
  for (const auto& [name, epochs] : cfg.freeze_after) {
    engine::ParamPtr found;
    std::string valid;
    for (auto& [path, p] : t.model->named_parameters()) {
      const std::string shown = models::pytorch_path(cfg.model, path);
      if (shown == name) found = p;
      if (p->trainable) valid += (valid.empty() ? "" : ", ") + shown;
    }
    if (!found || !found->trainable)
      usage_error("--freeze-after: " + cfg.model + (found ? "'s parameter '" + name + "' is frozen already" : " has no parameter '" + name + "'") +
                  " (its trainable ones: " + valid + ")");
    t.freeze_after.emplace_back(found, epochs);
  }
  engine::LossScalerConfig scfg;
  scfg.enabled = compute == DType::F16;  // BF16 has FP32's range: no scaling needed
  scfg.init_scale = cfg.init_scale;
  scfg.growth_interval = cfg.growth_interval;
  t.scaler = std::make_unique<engine::LossScaler>(scfg);
  return t;
}

void resume(const Config& cfg, Training& t) {
  const engine::StateDict ck = engine::load_checkpoint(cfg.resume);
  ENGINE_CHECK(ck.get("model") == cfg.model,
               "checkpoint " << cfg.resume << " holds a " << ck.get("model") << ", not a " << cfg.model << " (use --model)");
  t.model->load_state(ck);
  if (!cfg.eval_only) {
    ENGINE_CHECK(ck.get("optimizer") == cfg.optimizer,
                 "checkpoint " << cfg.resume << " was trained with " << ck.get("optimizer") << ", not " << cfg.optimizer);
    t.opt->load_state(ck);
    const bool saved_ema = ck.meta.count("ema") && ck.get("ema") == "1";
    ENGINE_CHECK(saved_ema == cfg.ema, "checkpoint " << cfg.resume << " was trained " << (saved_ema ? "with" : "without")
                                                     << " --ema; resume it " << (saved_ema ? "with" : "without") << " --ema");
    if (t.average) t.average->load_state(ck);
    t.scaler->load_state({ck.get_double("scaler/scale"), ck.get_int("scaler/growth_tracker"),
                          ck.get_int("scaler/skipped_steps"), ck.get_int("scaler/consecutive_skips")});
    t.step = ck.get_int("step");
    // Steps are counted in optimizer steps of `accumulate` micro-batches of --batch-size
    // images: another K or another batch would resume at another image and another epoch.
    // (Checkpoints are written between steps, never inside one.)
    const int64_t saved_k = ck.meta.count("accumulate") ? ck.get_int("accumulate") : 1;
    ENGINE_CHECK(saved_k == cfg.accumulate, "checkpoint " << cfg.resume << " was trained with --accumulate " << saved_k
                                                          << ", not " << cfg.accumulate);
    const int64_t saved_batch = ck.get_int("batch_size");
    ENGINE_CHECK(saved_batch == cfg.batch_size, "checkpoint " << cfg.resume << " was trained with --batch-size "
                                                              << saved_batch << ", not " << cfg.batch_size);
  }
  std::fprintf(stderr, "resumed from %s at step %lld\n", cfg.resume.c_str(), static_cast<long long>(ck.get_int("step")));
}

// Called on every rank: rank 0's batch-norm statistics go to all (as DDP's), rank 0 writes,
// and the others wait for the file, so a resume on any rank reads the whole of it.
void save(const Config& cfg, const Training& t, const std::vector<std::string>& class_names, const std::string& path) {
  engine::dist::broadcast_buffers(*t.model);
  t.saved_step = -1;  // until this write is known to have ended well
  if (engine::dist::world().rank != 0) {
    engine::dist::barrier("checkpoint written by rank 0");
    t.saved_step = t.step;
    t.saved_path = path;
    return;
  }
  engine::StateDict ck;
  t.model->save_state(ck);
  t.opt->save_state(ck);
  if (t.average) t.average->save_state(ck);
  const auto s = t.scaler->state();
  ck.set_double("scaler/scale", s.scale);
  ck.set_int("scaler/growth_tracker", s.growth_tracker);
  ck.set_int("scaler/skipped_steps", s.skipped_steps);
  ck.set_int("scaler/consecutive_skips", s.consecutive_skips);
  ck.set_int("step", t.step);
  ck.meta["model"] = cfg.model;
  ck.meta["optimizer"] = cfg.optimizer;
  ck.meta["optimizer_state"] = cfg.optimizer_state;
  ck.meta["precision"] = cfg.precision;
  ck.meta["seed"] = std::to_string(cfg.seed);
  ck.set_int("batch_size", cfg.batch_size);
  ck.set_int("accumulate", cfg.accumulate);
  ck.meta["ema"] = t.average ? "1" : "0";
  ck.meta["classes"] = models::join_class_names(class_names);
  engine::save_checkpoint(path, ck);
  engine::dist::barrier("checkpoint written by rank 0");
  t.saved_step = t.step;
  t.saved_path = path;
}

// trainer --resume CKPT --export FILE --export-dtype int8: calibrated on --calibrate training
// images, quantized (models/int8_net.h), written with the method and the images' source.
int export_int8(const Config& cfg, engine::Module& model, const std::string& model_name, int64_t steps,
                const std::vector<std::string>& classes) {
  // Calibration and quantization run on the CPU whatever --device says ("auto" included).
  ENGINE_CHECK(cfg.device.rfind("cuda", 0) != 0,
               "INT8 quantization runs on the CPU only (--device " << cfg.device << ": not yet; docs/quantization.md)");
  Config data_cfg = cfg;
  data_cfg.subset = 0;
  const Data data = load_data(data_cfg, engine::Device::cpu());
  ENGINE_CHECK(data.class_names == classes, cfg.resume << " was trained on other classes than " << data.source);
  const int64_t n = std::min(cfg.calibrate, data.train.size());
  const auto method = engine::parse_calibration_method(cfg.calibration_method);
  const models::Int8Net q = models::quantize_model(
      model, model_name, models::calibration_batches(data.train.images.data<uint8_t>(), data.train.size(), n), method);
  q.save(cfg.export_path, {{"classes", models::join_class_names(classes)},
                           {"steps", std::to_string(steps)},
                           {"calibration_images", std::to_string(n) + " of " + data.source}});
  std::printf("exported %s (%s, step %lld) to %s as INT8: %s; %lld calibration images; weights %.2f MB (FP32 %.2f MB)\n",
              cfg.resume.c_str(), model_name.c_str(), static_cast<long long>(steps), cfg.export_path.c_str(),
              models::int8_summary(q).c_str(), static_cast<long long>(n), q.weight_bytes() / 1e6,
              q.fp32_weight_bytes() / 1e6);
  return 0;
}

// trainer --resume CKPT --export FILE: the checkpoint's FP32 masters under PyTorch's names.
int export_checkpoint(const Config& cfg) {
  const engine::StateDict ck = engine::load_checkpoint(cfg.resume);
  const std::string model_name = ck.get("model");
  std::vector<std::string> classes = models::class_names_from(ck.meta);
  if (classes.empty()) classes = data::cifar10_class_names();  // checkpoints from before class names were saved
  auto model = models::make_model(model_name, static_cast<int>(classes.size()));
  model->load_state(ck);
  if (cfg.export_dtype == "int8") return export_int8(cfg, *model, model_name, ck.get_int("step"), classes);
  models::export_safetensors(cfg.export_path, *model, model_name, precision_dtype(cfg.export_dtype), ck.get_int("step"),
                             classes);
  std::printf("exported %s (%s, %lld parameters, step %lld) to %s as %s safetensors\n", cfg.resume.c_str(),
              model_name.c_str(), static_cast<long long>(model->num_parameters()),
              static_cast<long long>(ck.get_int("step")), cfg.export_path.c_str(), cfg.export_dtype.c_str());
  return 0;
}

// ---- seeing the numbers: --inspect-numerics and --detect-anomaly --------------------------
struct NumericsRow {
  std::string layer, kind, dtype;
  double scale;  // the loss scale the values carry (gradients), 1 for activations
};

std::string share_str(int64_t k, int64_t n) {
  if (k == 0) return "0";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2g%%", 100.0 * static_cast<double>(k) / static_cast<double>(n));
  return buf;
}

// Installs what watches one step: anomaly checks every step in anomaly mode, and on inspected
// steps a collector queueing each layer's output statistics (no host read until the report).
struct StepWatch {
  std::optional<engine::NumericsScope> scope;
  engine::RangeBatch batch;
  std::vector<NumericsRow> rows;
  double scale = 1;
  bool inspect = false;
  engine::NumericsHooks* t_hooks = nullptr;

  StepWatch(const Config& cfg, Training& t) : t_hooks(&t.hooks) {
    inspect = cfg.inspect_numerics > 0 && t.step % cfg.inspect_numerics == 0;
    if (!inspect && cfg.detect_anomaly.empty()) return;  // the usual step: nothing installed
    scale = t.scaler->current_scale();  // a host read on the GPU: only on watched steps
    engine::NumericsHooks& h = t.hooks;
    h.anomaly = !cfg.detect_anomaly.empty();
    h.strict = cfg.detect_anomaly == "strict";
    h.scaler_on = t.scaler->config().enabled;
    h.step = t.step + 1;
    h.loss_scale = scale;
    h.noted_this_step = false;
    h.on_layer_output = nullptr;
    if (inspect)
      h.on_layer_output = [this, &t](const engine::Module& m, const std::string& name, const Tensor& y) {
        auto it = std::find_if(t.layers.begin(), t.layers.end(), [&](const auto& l) { return l.module == &m; });
        if (it == t.layers.end() || !it->leaf || !engine::is_floating(y.dtype())) return;
        const std::string d = m.describe();
        batch.add(y, 1.0);
        rows.push_back({name, d.substr(0, d.find('(')), engine::dtype_name(y.dtype()), 1.0});
      };
    scope.emplace(h);
  }

  // With --accumulate, the table shows the first micro-batch's activations (and the step's
  // gradients); anomaly checks go on through every micro-batch.
  void first_micro_batch_done() {
    if (inspect) t_hooks->on_layer_output = nullptr;
  }

  // After the step: the gradients (still scaled: the fused update unscales as it reads them),
  // one read of every statistic, the table and the JSON lines.
  void report(const Config& cfg, Training& t, JsonLog& jlog) {
    scope.reset();
    t.hooks.on_layer_output = nullptr;  // it captures this watch
    if (!inspect) return;
    for (const auto& [path, p] : t.model->named_parameters()) {
      const Tensor g = p->grad();
      if (!g.defined()) continue;
      batch.add(g, scale);
      rows.push_back({models::pytorch_path(cfg.model, path), "gradient", engine::dtype_name(g.dtype()), scale});
    }
    const std::vector<engine::RangeStats> stats = batch.read();
    std::printf("numerics at step %lld, loss scale %g (FP16: subnormal below 6.1e-05, zero at or below 3.0e-08, "
                "inf from 65520; flush/S: what would flush without the loss scale)\n",
                static_cast<long long>(t.step), scale);
    std::printf("  %-20s %-13s %-5s %9s %7s %8s %7s %7s %8s %7s %5s %5s\n", "layer", "kind", "dtype", "absmax", "zeros",
                "subnorm", "flush", "flush/S", "near-ovf", "ovf", "inf", "nan");
    for (size_t i = 0; i < rows.size(); ++i) {
      const NumericsRow& r = rows[i];
      const engine::RangeStats& s = stats[i];
      const bool scaled = r.kind == "gradient";
      std::printf("  %-20s %-13s %-5s %9.3g %7s %8s %7s %7s %8s %7s %5lld %5lld\n", r.layer.c_str(), r.kind.c_str(),
                  r.dtype.c_str(), s.absmax, share_str(s.zeros, s.count).c_str(), share_str(s.subnormal, s.count).c_str(),
                  share_str(s.flush, s.count).c_str(), scaled ? share_str(s.flush_unscaled, s.count).c_str() : "-",
                  share_str(s.near_overflow, s.count).c_str(), share_str(s.overflow, s.count).c_str(),
                  static_cast<long long>(s.inf), static_cast<long long>(s.nan));
      jlog.write("numerics",
                 {{"step", double(t.step)}, {"scale", r.scale}, {"count", double(s.count)}, {"absmax", s.absmax},
                  {"zeros", s.share(s.zeros)}, {"subnormal", s.share(s.subnormal)}, {"flush", s.share(s.flush)},
                  {"flush_unscaled", s.share(s.flush_unscaled)}, {"near_overflow", s.share(s.near_overflow)},
                  {"overflow", s.share(s.overflow)},
                  {"inf", double(s.inf)}, {"nan", double(s.nan)}},
                 {{"layer", r.layer}, {"kind", r.kind}, {"dtype", r.dtype}});
    }
    std::fflush(stdout);
  }
};

// Resident memory of this process (Linux: /proc/self/statm), 0 where unknown: the soak test
// (tests/soak.py) checks it stays flat after warm-up.
int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  if (!(statm >> pages_total >> pages_resident)) return 0;
  return pages_resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// ---- one epoch ----------------------------------------------------------------------------
struct EpochResult {
  int64_t images = 0;
  double seconds = 0, loss_sum = 0;  // seconds: training only (not --checkpoint-every's saves)
  int64_t loss_count = 0;
  int stop_signal = 0;  // the signal that stopped the epoch at a step boundary (StopVote), or 0
};

// The steps of one epoch from t.step on (a resumed run starts mid-epoch) up to total_steps,
// printing the classic loop's lines and logging them. The schedules (learning rate, the weight
// average) span schedule_steps, all of --epochs: --max-steps only stops the run earlier, so a
// run stopped there and resumed takes the very steps of one that never stopped.
EpochResult train_epoch(const Config& cfg, Training& t, const Data& data, int64_t epoch, int64_t steps_per_epoch,
                        int64_t total_steps, int64_t schedule_steps, DType compute, engine::Device device, Tensor& x_buf, Tensor& y_buf,
                        JsonLog& jlog, engine::dist::StopVote& stop, const std::function<void()>& save_checkpoint) {
  const bool tty = isatty(fileno(stderr));
  const kernels::AugmentConfig aug = train_augment(cfg);
  const bool summed = cfg.loss_reduction == "sum";
  const engine::Reduction reduction = summed ? engine::Reduction::Sum : engine::Reduction::Mean;
  const Split& train = data.train;
  const std::vector<int32_t> order = epoch_order(train.size(), cfg.seed, epoch);
  Tensor order_dev = Tensor::from_ints(order, {train.size()});
  if (device.is_cuda()) order_dev = order_dev.to(device);
  EpochResult r;
  const auto t0 = std::chrono::steady_clock::now();
  engine::LossScaler& scaler = *t.scaler;
  const int64_t ranks = engine::dist::world().size, rank = engine::dist::world().rank;
  const int64_t k = cfg.accumulate, batches = micro_batches_per_epoch(train.size(), cfg.batch_size, ranks, cfg.drop_last);
  // Each micro-batch's share of the step's images seeds its backward (undefined: 1, the plain
  // one-process, one-micro-batch step). Shares change only in an epoch's short last step.
  std::map<double, Tensor> shares;
  auto share_tensor = [&](double v) -> Tensor {
    if (v == 1.0) return Tensor();
    auto it = shares.find(v);
    if (it == shares.end()) it = shares.emplace(v, Tensor::full({1}, v, DType::F32, device)).first;
    return it->second;
  };
  double saving_seconds = 0;
  auto last_log_time = t0;
  double last_log_saving = 0;
  int64_t last_log_images = 0;
  for (int64_t i = t.step % steps_per_epoch; i < steps_per_epoch && t.step < total_steps; ++i) {
    // A signal on any rank: every rank leaves at the same step boundary (no wait of its own).
    if ((r.stop_signal = stop.vote(models::StopSignals::received())) != 0) break;
    // Optimizer step i takes micro-batches [i*k, min((i+1)*k, batches)) of the epoch's order.
    const int64_t first = i * k, last = std::min(first + k, batches);
    const int64_t step_begin = first * cfg.batch_size;
    const int64_t step_images = std::min(last * cfg.batch_size, train.size()) - step_begin;
    t.opt->lr = lr_at(cfg, t.step, schedule_steps);
    // --freeze-after: trainable for the first ceil(E x steps per epoch) steps (frozen, the
    // optimizer leaves the parameter alone from here on).
    for (auto& [p, epochs] : t.freeze_after) {
      const bool on = t.step < static_cast<int64_t>(std::ceil(epochs * static_cast<double>(steps_per_epoch)));
      if (p->trainable != on) p->set_trainable(on);
    }
    StepWatch watch(cfg, t);
    t.opt->zero_grad();
    Tensor loss;        // the step's mean loss on this rank's images, on the device
    double share_sum = 0;  // this rank's part of the step's images
    for (int64_t m = first; m < last; ++m) {
      const int64_t begin = m * cfg.batch_size, b = std::min(cfg.batch_size, train.size() - begin);
      // This rank's shard of the global micro-batch: contiguous, near-equal, never empty (a
      // last batch smaller than the number of ranks is dropped). Augmentation draws depend on
      // the image, not the rank, so the ranks together see what one process would.
      const int64_t lo = begin + b * rank / ranks, n = begin + b * (rank + 1) / ranks - lo;
      Tensor x = n == x_buf.dim(0) ? x_buf : x_buf.slice0(0, n);
      Tensor y = n == y_buf.dim(0) ? y_buf : y_buf.slice0(0, n);
      engine::make_batch(train.images, train.labels, order_dev.slice0(lo, lo + n), cfg.augment, aug, cfg.seed,
                         static_cast<uint64_t>(epoch), x, y);
      engine::set_batch_offset(lo - begin);
      // A summed loss adds up over micro-batches and ranks as it is; a mean is weighted by share.
      const double share = summed ? 1.0 : double(n) / double(step_images);
      // Gradients add up locally; the reducer sums them across ranks once, in the last backward.
      const Tensor micro_loss =
          models::forward_backward(*t.model, scaler, x, y, compute, cfg.label_smoothing, share_tensor(share),
                                   m == last - 1 ? t.reducer.get() : nullptr, reduction);
      if (m == first) watch.first_micro_batch_done();
      {
        engine::NoGradScope no_grad;
        const Tensor part = share == 1.0 ? micro_loss : engine::scale(micro_loss, share);
        loss = loss.defined() ? engine::add(loss, part) : part;
      }
      share_sum += summed ? double(n) : share;
      r.images += n;
    }
    models::optimizer_step(*t.opt, scaler, cfg.clip_grad_norm);
    ++t.step;
    if (t.average) {
      if (t.step % cfg.ema_every == 0)
        t.average->update(*t.model, models::ema_decay(cfg.ema_rate, cfg.ema_every, t.step, schedule_steps));
      if (t.step == schedule_steps) t.average->update(*t.model, 1.0);  // the run ends on the average
    }
    watch.report(cfg, t, jlog);
    if (cfg.checkpoint_every > 0 && t.step % cfg.checkpoint_every == 0) {
      const auto s0 = std::chrono::steady_clock::now();
      save_checkpoint();
      saving_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    }
    const bool log_now = (i + 1) % cfg.log_every == 0 || i == steps_per_epoch - 1;  // the classic loop's cadence
    // The live progress line on a terminal, ten times per log interval: reading the loss
    // and scale is a host sync on a GPU, so never on every step.
    const bool progress = tty && (i + 1) % std::max<int64_t>(1, cfg.log_every / 10) == 0;
    if (!log_now && !progress) continue;
    double l = loss.item();  // sum of share * loss over this rank's micro-batches (a summed loss: its sum)
    if (log_now && ranks > 1) {  // the global batch's mean loss (every rank logs at the same steps)
      engine::dist::all_reduce_sum(&l, 1, "loss for the log");
      if (summed) l /= double(step_images);
    } else if (ranks > 1 || summed) {
      l /= share_sum;  // the progress line: this rank's own mean (per image, for a summed loss)
    }
    r.loss_sum += l;
    ++r.loss_count;
    if (progress)
      std::fprintf(stderr, "\r  epoch %lld/%lld  step %lld/%lld  loss %.4f  scale %g  ", static_cast<long long>(epoch + 1),
                   static_cast<long long>(std::ceil(cfg.epochs)), static_cast<long long>(i + 1),
                   static_cast<long long>(steps_per_epoch), l, scaler.current_scale());
    if (!log_now) continue;
    if (tty) std::fprintf(stderr, "\r%80s\r", "");
    const double norm = cfg.clip_grad_norm > 0 ? scaler.last_grad_norm() : 0.0;  // before clipping
    std::printf("Epoch [%lld/%lld], Step [%lld/%lld], Loss: %.4f, Scale: %g, Skipped: %lld",
                static_cast<long long>(epoch + 1), static_cast<long long>(std::ceil(cfg.epochs)), static_cast<long long>(i + 1),
                static_cast<long long>(steps_per_epoch), l, scaler.current_scale(),
                static_cast<long long>(scaler.skipped_steps()));
    if (cfg.clip_grad_norm > 0) std::printf(", Grad norm: %.4g", norm);
    std::printf("\n");
    std::fflush(stdout);
    // The steady state, for the soak test: memory and allocator counts, and the speed since
    // the last line (saves excluded).
    const auto now = std::chrono::steady_clock::now();
    const double interval = std::chrono::duration<double>(now - last_log_time).count() - saving_seconds + last_log_saving;
    const int64_t interval_images = r.images - last_log_images;
    last_log_time = now;
    last_log_saving = saving_seconds;
    last_log_images = r.images;
    const engine::MemoryStats& mem = engine::allocator_for(device).stats();
    std::vector<std::pair<std::string, double>> fields = {
        {"step", double(t.step)}, {"epoch", double(epoch + 1)}, {"loss", l}, {"scale", scaler.current_scale()},
        {"skipped", double(scaler.skipped_steps())}, {"lr", t.opt->lr},
        {"images_per_s", interval > 0 ? double(interval_images) * double(ranks) / interval : 0.0},
        {"rss_bytes", double(resident_bytes())}, {"live_bytes", double(mem.total_current)},
        {"live_blocks", double(mem.live_blocks)}, {"system_allocations", double(mem.system_allocations)}};
    if (cfg.clip_grad_norm > 0) fields.push_back({"grad_norm", norm});
    jlog.write("step", fields);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - saving_seconds;
  return r;
}

// ---- stopped by a signal -------------------------------------------------------------------
// Saves (unless this step is already written there), says where and how to resume, and gives
// the exit status of the signal.
int stop_saved(const Config& cfg, const Training& t, const std::vector<std::string>& class_names,
               int64_t steps_per_epoch, int sig) {
  const std::string path = cfg.checkpoint.empty() ? "interrupted-" + cfg.model + ".ckpt" : cfg.checkpoint;
  if (t.saved_step != t.step || t.saved_path != path) save(cfg, t, class_names, path);
  // The same command line continues the run: the same flags, --resume the saved file.
  std::string again;
  for (size_t i = 0; i < cfg.args.size(); ++i) {
    const std::string& a = cfg.args[i];
    if (a == "--resume" || a == "--init-from") {
      ++i;
      continue;
    }
    if (a.rfind("--resume=", 0) == 0 || a.rfind("--init-from=", 0) == 0) continue;
    const bool plain = !a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                         "0123456789-_=./,:+@%") == std::string::npos;
    again += (again.empty() ? "" : " ") + (plain ? a : "'" + a + "'");
  }
  // The resumed run saves where this one did (without --checkpoint it would save nothing).
  if (cfg.checkpoint.empty()) again += " --checkpoint " + path;
  if (engine::dist::world().size > 1) again = "mpirun -np " + std::to_string(engine::dist::world().size) + " " + again;
  std::fflush(stdout);
  std::fprintf(stderr, "trainer: stopped by %s after step %lld (epoch %lld, step %lld of %lld); checkpoint saved to "
               "%s; resume with: %s --resume %s\n",
               models::StopSignals::name(sig), static_cast<long long>(t.step),
               static_cast<long long>((t.step - 1) / steps_per_epoch + 1),
               static_cast<long long>((t.step - 1) % steps_per_epoch + 1), static_cast<long long>(steps_per_epoch),
               path.c_str(), again.c_str(), path.c_str());
  return models::StopSignals::exit_code(sig);
}

// ---- the summary ----------------------------------------------------------------------------
void print_summary(const Config& cfg, Training& t, const Data& data, const EvalResult& last, double train_seconds,
                   int64_t images_seen, engine::Device device, const engine::MemoryStats& mem, JsonLog& jlog) {
  // FP32 inference with the FP32 masters (training is over: the compute copies can go).
  t.model->set_compute_dtype(DType::F32);
  const EvalResult fp32 =
      evaluate(*t.model, data.test, DType::F32, cfg.batch_size, device, models::input_normalisation(cfg.model));
  const engine::LossScaler& scaler = *t.scaler;
  std::printf("\nSummary: %s, %s, %lld steps (%lld skipped for overflow), final loss scale %g\n", cfg.model.c_str(),
              cfg.precision.c_str(), static_cast<long long>(t.step), static_cast<long long>(scaler.skipped_steps()),
              scaler.current_scale());
  std::printf("  test accuracy %.2f%% (%s inference), %.2f%% (FP32 inference)\n", last.accuracy, cfg.precision.c_str(),
              fp32.accuracy);
  const engine::dist::World& w = engine::dist::world();
  double totals[2] = {static_cast<double>(images_seen), static_cast<double>(mem.total_peak)};
  engine::dist::all_reduce_sum(totals, 2, "summary totals");
  const double rate = train_seconds > 0 ? totals[0] / train_seconds : 0.0;
  if (w.size > 1)
    std::printf("  training time %.1f s, %.0f images/s in all over %d ranks, %.0f per rank\n", train_seconds, rate,
                w.size, rate / w.size);
  else
    std::printf("  training time %.1f s, %.0f images/s\n", train_seconds, rate);
  std::printf("  peak %s memory during training: %s", device.str().c_str(), mib(mem.total_peak).c_str());
  if (w.size > 1) std::printf(" on rank 0, %s summed over the %d ranks", mib(int64_t(totals[1])).c_str(), w.size);
  std::printf("\n");
  for (int k = 0; k < engine::kNumMemKinds; ++k)
    std::printf("    %-16s %12s  (own peak %s)\n", engine::mem_kind_name(static_cast<engine::MemKind>(k)),
                mib(mem.at_total_peak[k]).c_str(), mib(mem.peak[k]).c_str());
  std::vector<std::pair<std::string, double>> fields = {
      {"test_accuracy", last.accuracy}, {"test_accuracy_fp32_inference", fp32.accuracy},
      {"train_seconds", train_seconds}, {"images_per_s", rate}, {"ranks", double(w.size)},
      {"steps", double(t.step)}, {"skipped", double(scaler.skipped_steps())}, {"peak_bytes", double(mem.total_peak)}};
  for (int k = 0; k < engine::kNumMemKinds; ++k)
    fields.emplace_back(std::string("peak_") + engine::mem_kind_name(static_cast<engine::MemKind>(k)),
                        double(mem.at_total_peak[k]));
  jlog.write("summary", fields, {{"model", cfg.model}, {"precision", cfg.precision}});
}

// Data-parallel set-up before anything touches a GPU: the checks, the threads per rank, each
// local rank's own GPU (it becomes that process's cuda:0) and the NCCL communicator.
void join_data_parallel(const Config& cfg) {
  namespace dist = engine::dist;
  const dist::World& w = dist::world();
  dist::set_timeout(cfg.timeout);
  if (w.size == 1) return;
  if (!cfg.export_path.empty()) usage_error("--export runs in one process, not under mpirun");
  if (cfg.batch_size % w.size != 0)
    usage_error("--batch-size is the global batch: " + std::to_string(cfg.batch_size) + " does not split into " +
                std::to_string(w.size) + " equal shards");
#ifdef _OPENMP
  if (cfg.threads == 0) omp_set_num_threads(std::max(1, omp_get_num_procs() / w.local_size));
#endif
  if (cfg.device != "cpu" && w.local_size > 1) {
    // One GPU per local rank: the local_rank-th of those visible (all when none are named).
    std::vector<std::string> visible;
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
      std::stringstream ss(v);
      for (std::string d; std::getline(ss, d, ',');) visible.push_back(d);
    }
    ENGINE_CHECK(visible.empty() || static_cast<int>(visible.size()) >= w.local_size,
                 w.local_size << " ranks on this machine but CUDA_VISIBLE_DEVICES names " << visible.size() << " GPUs");
    const std::string mine = visible.empty() ? std::to_string(w.local_rank) : visible[static_cast<size_t>(w.local_rank)];
    setenv("CUDA_VISIBLE_DEVICES", mine.c_str(), 1);
  }
}

int run(const Config& cfg) {
  namespace dist = engine::dist;
  const dist::World& world = dist::world();
  join_data_parallel(cfg);
#ifdef _OPENMP
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
#endif
  const engine::Device device = engine::parse_device(cfg.device);
  engine::set_cuda_deterministic(cfg.deterministic);
  const DType compute = precision_dtype(cfg.precision);
  engine::manual_seed(cfg.seed);
  dist::set_sync_batch_norm(cfg.sync_bn);
  if (cfg.sync_bn && world.size == 1)
    std::fprintf(stderr, "notice: --sync-bn with one process is plain batch-norm\n");
  if (device.is_cuda() && world.size > 1) dist::init_nccl(device);

  if (!cfg.export_path.empty()) return export_checkpoint(cfg);

  // Rank 0 first: it may decode the image folders into the cache the others then read.
  if (world.rank != 0) dist::barrier("rank 0 loading the data set", 12.0);
  double setup_seconds = 0;  // the whitening layer's, counted in the recipe's time to the result
  const kernels::AugmentConfig norm = models::input_normalisation(cfg.model);
  // airbench94's first layer is computed from training images (a resumed or imported run has
  // its weights): the sample is drawn here, while the host copy of the set is at hand.
  const bool whiten = cfg.model == "airbench94" && cfg.whiten && cfg.resume.empty() && cfg.init_from.empty();
  data::Dataset whiten_sample;
  int classes = 0;
  const Data data = load_data(cfg, device, [&](const data::Dataset& train, int n_classes) {
    classes = n_classes;
    if (!whiten) return;
    const auto w0 = std::chrono::steady_clock::now();
    for (int64_t i : models::whitening_sample(train.size(), std::min<int64_t>(cfg.whiten_images, train.size()), cfg.seed)) {
      whiten_sample.images.insert(whiten_sample.images.end(), train.image(i), train.image(i) + data::Dataset::kImageBytes);
      whiten_sample.labels.push_back(train.labels[static_cast<size_t>(i)]);
    }
    setup_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  });
  if (world.rank == 0) dist::barrier("rank 0 loading the data set", 12.0);
  // After the barrier, so a usage error found here (a layer name) ends every rank alike.
  Training t = make_training(cfg, classes, device, compute);
  if (whiten) {
    const auto w0 = std::chrono::steady_clock::now();
    engine::Conv2d* first = nullptr;
    for (auto& [path, m] : t.model->named_modules())
      if (path == "0") first = dynamic_cast<engine::Conv2d*>(m);
    ENGINE_CHECK(first, "airbench94: its first layer is not the whitening convolution");
    models::init_whitening(*first, whiten_sample, whiten_sample.size(), cfg.seed, norm);
    setup_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  }
  // The weight average starts from the weights the run starts from: a resumed run loads it
  // (below), a new one takes the model's after an import and rank 0's broadcast.
  if (cfg.ema && !cfg.resume.empty()) t.average = std::make_unique<engine::WeightAverage>(*t.model);
  if (!cfg.resume.empty()) resume(cfg, t);
  if (!cfg.init_from.empty()) {
    const auto meta = models::import_safetensors(cfg.init_from, *t.model, cfg.model);
    std::fprintf(stderr, "starting from the weights in %s\n", cfg.init_from.c_str());
    const std::vector<std::string> file_classes = models::class_names_from(meta);
    if (!file_classes.empty() && file_classes != data.class_names)
      std::fprintf(stderr, "warning: %s was trained on other classes than this data set's (fine-tuning re-labels them)\n",
                   cfg.init_from.c_str());
  }

  if (world.size > 1) {
    dist::broadcast_module(*t.model);  // DDP's start: rank 0's weights everywhere, verified
    t.reducer = std::make_unique<dist::GradReducer>(t.model->parameters());
  }
  if (cfg.ema && !t.average) t.average = std::make_unique<engine::WeightAverage>(*t.model);
  // A last batch smaller than the number of ranks would leave a rank without images: dropped.
  const int64_t steps_per_epoch =
      (micro_batches_per_epoch(data.train.size(), cfg.batch_size, world.size, cfg.drop_last) + cfg.accumulate - 1) /
      cfg.accumulate;
  ENGINE_CHECK(steps_per_epoch > 0, "--batch-size " << cfg.batch_size << " with --drop-last leaves no step in an epoch of "
                                                    << data.train.size() << " images");
  const int64_t all_steps = static_cast<int64_t>(std::ceil(cfg.epochs * static_cast<double>(steps_per_epoch)));
  const int64_t total_steps = cfg.max_steps > 0 ? std::min(cfg.max_steps, all_steps) : all_steps;
  std::printf("model %s (%lld parameters), precision %s, device %s, data: %s\n", cfg.model.c_str(),
              static_cast<long long>(t.model->num_parameters()), cfg.precision.c_str(), device.str().c_str(),
              data.source.c_str());
  if (!device.is_cuda()) {
    // Which unit multiplies 16-bit data here: BF16 has one on AMX and AVX512-BF16 CPUs; no CPU
    // in our pool has one for FP16 (AMX-FP16 is a later generation), so FP16 runs widened.
    kernels::cpu::TileUnit unit;
    const bool bf16_unit = kernels::cpu::bf16_tile_unit(&unit);
    if (compute == DType::F16 && bf16_unit)
      std::printf("note: FP16 runs widened to FP32 on this CPU (no FP16 matrix unit); its %s unit multiplies BF16: "
                  "--precision bf16\n", kernels::cpu::tile_unit_name(unit));
    else if (compute == DType::BF16)
      std::printf("BF16 matrix products on %s%s\n",
                  bf16_unit ? kernels::cpu::tile_unit_name(unit) : "the FP32 units, widened (no BF16 unit in use; ISA ",
                  bf16_unit ? "" : (std::string(kernels::cpu::cpu_isa_name(kernels::cpu::cpu_isa())) + ")").c_str());
  }
  std::printf("train %lld images, test %lld images, batch %lld, %lld steps per epoch, optimizer %s lr %g\n",
              static_cast<long long>(data.train.size()), static_cast<long long>(data.test.size()),
              static_cast<long long>(cfg.batch_size), static_cast<long long>(steps_per_epoch), cfg.optimizer.c_str(),
              cfg.lr);
  if (cfg.accumulate > 1)
    std::printf("gradient accumulation: %lld micro-batches of %lld per optimizer step (effective batch %lld)\n",
                static_cast<long long>(cfg.accumulate), static_cast<long long>(cfg.batch_size),
                static_cast<long long>(cfg.accumulate * cfg.batch_size));
  if (world.size > 1) {
    std::printf("data-parallel: %d ranks (%d on this machine), %lld images each per step, gradients summed in %zu "
                "buckets (%s per step)%s\n",
                world.size, world.local_size, static_cast<long long>(cfg.batch_size / world.size),
                t.reducer->buckets().size(), mib(t.reducer->bytes_per_step()).c_str(),
                cfg.sync_bn ? ", batch-norm statistics over all ranks" : "");
  }
  std::fflush(stdout);
  JsonLog jlog(world.rank == 0 ? cfg.log : std::string());

  if (cfg.eval_only) {
    const EvalResult r = evaluate(*t.model, data.test, compute, cfg.batch_size, device, norm, cfg.tta);
    t.model->set_compute_dtype(DType::F32);  // FP32 inference reads the FP32 masters
    const EvalResult r32 = evaluate(*t.model, data.test, DType::F32, cfg.batch_size, device, norm, cfg.tta);
    std::printf("test loss %.4f, accuracy %.2f%% (%s); FP32 inference %.2f%%\n", r.loss, r.accuracy,
                cfg.precision.c_str(), r32.accuracy);
    return 0;
  }

  const int64_t local_batch = cfg.batch_size / world.size;
  Tensor x_buf = Tensor::empty({local_batch, 32, 32, 3}, compute, device);
  Tensor y_buf = Tensor::empty({local_batch}, DType::I32, device);
  auto& stats_alloc = engine::allocator_for(device);
  stats_alloc.reset_peak();
  double train_seconds = 0;
  int64_t images_seen = 0;
  EvalResult last{};
  // From here a signal stops the run at a step boundary, saved (models/stop_signals.h); the
  // handlers go before the summary, when everything is saved.
  std::optional<models::StopSignals> signals(std::in_place);
  dist::StopVote stop;
  const auto save_checkpoint = [&] { save(cfg, t, data.class_names, cfg.checkpoint); };
  for (int64_t epoch = t.step / steps_per_epoch; t.step < total_steps; ++epoch) {
    const EpochResult e = train_epoch(cfg, t, data, epoch, steps_per_epoch, total_steps, all_steps, compute, device, x_buf, y_buf,
                                      jlog, stop, save_checkpoint);
    train_seconds += e.seconds;
    images_seen += e.images;
    if (e.stop_signal) return stop_saved(cfg, t, data.class_names, steps_per_epoch, e.stop_signal);
    last = evaluate(*t.model, data.test, compute, cfg.batch_size, device, norm);
    double epoch_images = static_cast<double>(e.images);  // over all ranks
    dist::all_reduce_sum(&epoch_images, 1, "images this epoch");
    std::printf("Epoch %lld/%lld done: test loss %.4f, test accuracy %.2f%%, %.0f images/s, epoch time %.1f s\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(std::ceil(cfg.epochs)), last.loss, last.accuracy,
                epoch_images / e.seconds, e.seconds);
    std::fflush(stdout);
    jlog.write("epoch", {{"epoch", double(epoch + 1)}, {"step", double(t.step)}, {"test_loss", last.loss},
                         {"test_accuracy", last.accuracy}, {"images_per_s", epoch_images / e.seconds},
                         {"epoch_seconds", e.seconds},
                         {"train_loss", e.loss_count ? e.loss_sum / double(e.loss_count) : NAN}});
    if (!cfg.checkpoint.empty()) save_checkpoint();
    // A signal during the evaluation or the save: stop here (every rank waits here anyway).
    if (const int sig = stop.vote_now(models::StopSignals::received()))
      return stop_saved(cfg, t, data.class_names, steps_per_epoch, sig);
  }
  // Stopped mid-epoch by --max-steps: save where it stopped, so --resume continues there.
  if (!cfg.checkpoint.empty() && t.step % steps_per_epoch != 0) save(cfg, t, data.class_names, cfg.checkpoint);
  if (const int sig = stop.vote_now(models::StopSignals::received()))  // one during that save
    return stop_saved(cfg, t, data.class_names, steps_per_epoch, sig);
  signals.reset();
  if (cfg.tta) {
    // airbench's figure: the setup, the training and this evaluation (the per-epoch ones and
    // the checkpoints' saves are not counted).
    const auto e0 = std::chrono::steady_clock::now();
    const EvalResult tta = evaluate(*t.model, data.test, compute, cfg.batch_size, device, norm, true);
    const double eval_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
    const double seconds = setup_seconds + train_seconds + eval_seconds;
    std::printf("TTA accuracy %.2f%% in %.1f s (whitening %.1f s, training %.1f s, evaluation %.1f s)\n", tta.accuracy,
                seconds, setup_seconds, train_seconds, eval_seconds);
    std::fflush(stdout);
    jlog.write("tta", {{"tta_accuracy", tta.accuracy}, {"accuracy", last.accuracy}, {"seconds", seconds},
                       {"setup_seconds", setup_seconds}, {"train_seconds", train_seconds},
                       {"eval_seconds", eval_seconds}});
  }
  print_summary(cfg, t, data, last, train_seconds, images_seen, device, stats_alloc.stats(), jlog);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun: join the job; rank 0 alone prints (errors from any rank still show, naming it).
  engine::dist::init(&argc, &argv);
  engine::dist::quiet_other_ranks();
  Config cfg;
  try {
    cfg = models::parse_trainer_args(argc, argv);
  } catch (const models::UsageError& e) {
    engine::dist::finalize();
    return models::report_usage_error("trainer", e);
  }
  if (cfg.action != models::ArgsAction::Help) {
    if (const int rc = models::report_environment_error()) {
      engine::dist::finalize();
      return rc;
    }
  }
  if (cfg.action == models::ArgsAction::Help) {
    std::fputs(models::kTrainerUsage, stdout);
  } else if (cfg.action == models::ArgsAction::Version) {
    std::printf("trainer (mpcnn), CUDA backend %s\n%s\n%s", engine::cuda_built() ? "built" : "not built",
                kernels::cpu::cpu_isa_report().c_str(), engine::cuda_library_versions().c_str());
  }
  if (cfg.action != models::ArgsAction::Run) {
    engine::dist::finalize();
    return 0;
  }
  // An error on any rank ends the whole job (MPI_Abort), so no rank waits for it forever. A
  // usage error found later (a layer name, the batch across ranks) is the same on every rank.
  const int rc = models::run_reporting_errors(
      [&] {
        try {
          return run(cfg);
        } catch (const models::UsageError& e) {
          return models::report_usage_error("trainer", e);
        }
      },
      [](const std::string& m) { engine::dist::abort_job(m); });
  engine::dist::finalize();
  return rc;
}

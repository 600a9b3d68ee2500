// Training-step benchmark: for each model and precision, images/s of the full training
// step (forward, FP32 loss, scaled backward, fused optimizer step) on a device-resident
// batch, time per CIFAR-10 epoch (50,000 images) at that rate, peak memory by kind, and model
// FLOP/s as a fraction of the measured GEMM peak of the same dtype on the same device.
// Ratios (FP16/BF16 vs FP32) are measured side by side in one run. --inference measures
// evaluation instead (forward only, eval mode): images/s and peak memory per dtype, and for
// models with batch-norm the same with BN folded into the convolutions, with how far the
// folded logits move (max |difference|, share of equal top-1) on the benchmark batch. On the
// CPU it adds an INT8 row per model (models/int8_net.h: calibrated on 256 other random images,
// percentile), its logits compared with FP32's the same way; its weight column counts the INT8
// file's bytes (int8 weights, FP32 scales and biases, the FP32 layers), its peak the resident
// weights (packed, with their per-channel terms) and the activations.
// --memory counts bytes instead of time (valid on any machine): peak memory by kind for each
// model in FP32, FP16 and FP16 with int8 optimizer state at each --batches size, the ratios to
// FP32, and the largest batch whose peak fits --max-batch-under (from the counted bytes at two
// batch sizes: activations and workspace grow linearly with the batch, the rest is fixed).
//   bench_train [--device cpu|cuda] [--models a,b] [--batch N] [--steps N] [--quick] [--inference] [--json FILE]
//               [--rounds N]   (--inference: the configurations timed in N interleaved rounds)
//               [--precisions f32,f16,bf16(,int8 with --inference)] [--profile] (CPU: time per kernel;
//               for INT8, per layer)
//   bench_train --memory [--models a,b] [--batches 8,32] [--max-batch-under 80GiB]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/amp.h"
#include "engine/device.h"
#include "engine/profile.h"
#include "engine/random.h"
#include "kernels/cpu/gemm.h"
#include "models/int8_net.h"
#include "models/cli.h"
#include "models/models.h"
#include "models/train_step.h"
#ifdef ENGINE_WITH_CUDA
#include "kernels/cuda/runtime.h"
#endif

using engine::DType;
using engine::Tensor;

namespace {

struct Result {
  std::string model, precision;
  int64_t batch = 0;
  double images_per_s = 0, step_ms = 0, gflops = 0, peak_gflops = 0, peak_fraction = 0;
  double epoch_s() const { return images_per_s > 0 ? 50000.0 / images_per_s : 0; }
  engine::MemoryStats mem;
  // --profile: time per CPU kernel over `profiled_steps` more steps, and those steps' own time.
  std::vector<engine::KernelTime> kernels;
  int profiled_steps = 0;
  double profiled_step_ms = 0;
};

// A --profile table: each kernel's calls and time per step, its share of the step, and the rest.
void print_profile(const std::string& what, int64_t batch, int steps, double step_ms,
                   const std::vector<engine::KernelTime>& kernels, const char* rest_label) {
  std::printf("\n%s, batch %lld: time per kernel over %d profiled steps of %.2f ms\n", what.c_str(),
              static_cast<long long>(batch), steps, step_ms);
  std::printf("  %-34s %8s %10s %7s\n", "kernel", "calls", "ms/step", "share");
  double in_kernels = 0;
  for (const engine::KernelTime& k : kernels) {
    const double ms = k.seconds * 1e3 / steps;
    in_kernels += ms;
    std::printf("  %-34s %8.1f %10.2f %6.1f%%\n", k.name.c_str(), double(k.calls) / steps, ms, 100 * ms / step_ms);
  }
  const double rest = step_ms - in_kernels;
  std::printf("  %-34s %8s %10.2f %6.1f%%\n", rest_label, "", rest, 100 * rest / step_ms);
}

// The CPU GEMM's FP32 peak on a large square product: the yardstick for model FLOP/s.
double cpu_gemm_peak_gflops() {
  const int64_t n = 1024;
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  auto run = [&] {
    kernels::cpu::gemm<float>(kernels::cpu::Trans::N, kernels::cpu::Trans::N, n, n, n, 1.0, a.data(), n, b.data(), n,
                              0.0, c.data(), n);
  };
  run();
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * n / best * 1e-9;
}

// The GPU's GEMM peak for one dtype: our linear op on a large square product (FP32 without
// TF32, as the engine runs FP32), timed over many back-to-back calls.
double cuda_gemm_peak_gflops(DType dt, engine::Device device) {
#ifdef ENGINE_WITH_CUDA
  const int64_t n = 4096;
  const Tensor x = engine::cast(engine::uniform({n, n}, -1, 1, DType::F32), dt).to(device);
  const Tensor w = engine::cast(engine::uniform({n, n}, -0.05, 0.05, DType::F32), dt).to(device);
  for (int i = 0; i < 3; ++i) (void)engine::linear(x, w, Tensor());
  kernels::cuda::synchronize();
  const int calls = 20;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) (void)engine::linear(x, w, Tensor());
  kernels::cuda::synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * n * n * n * calls / s * 1e-9;
#else
  (void)dt;
  (void)device;
  return 0;
#endif
}

Result bench(const std::string& name, DType dt, int64_t batch, int steps, engine::Device device, double peak,
             bool profile) {
  engine::manual_seed(1);
  auto model = models::make_model(name);
  model->set_compute_dtype(dt);
  model->to(device);
  engine::Adam opt(model->parameters(), 1e-3);
  engine::LossScalerConfig cfg;
  cfg.enabled = dt == DType::F16;
  engine::LossScaler scaler(cfg);
  Tensor x = engine::cast(engine::uniform({batch, 32, 32, 3}, -1, 1, DType::F32), dt).to(device);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>(i % 10);
  Tensor y = Tensor::from_ints(labels, {batch}).to(device);
  auto step = [&] {
    opt.zero_grad();
    engine::Tape tape;
    {
      engine::TapeScope scope(tape);
      engine::AutocastScope autocast(dt);
      tape.backward(scaler.scale(engine::cross_entropy((*model)(x), y)));
    }
    scaler.step(opt);
    scaler.update();
  };
  auto& alloc = engine::allocator_for(device);
  step();  // warm-up: optimizer state, algorithm choices, caches
  alloc.reset_peak();
  engine::reset_gemm_flops();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    if (device.is_cuda()) (void)opt.params()[0]->master.to_vector();  // wait for the device
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  Result r;
  r.model = name;
  r.precision = engine::dtype_name(dt);
  r.batch = batch;
  r.step_ms = median * 1e3;
  r.images_per_s = static_cast<double>(batch) / median;
  r.gflops = static_cast<double>(engine::gemm_flops()) / steps / median * 1e-9;
  r.peak_gflops = peak;
  r.peak_fraction = peak > 0 ? r.gflops / peak : 0;
  r.mem = alloc.stats();
  if (profile && device.is_cpu()) {  // after the timed steps, so the timers cost them nothing
    engine::take_kernel_profile();
    engine::set_kernel_profiling(true);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    r.profiled_step_ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3 / steps;
    engine::set_kernel_profiling(false);
    r.kernels = engine::take_kernel_profile();
    r.profiled_steps = steps;
  }
  return r;
}

struct InferenceResult {
  std::string model, precision;
  bool folded = false;
  int folded_pairs = 0;
  int64_t batch = 0;
  double images_per_s = 0, ms = 0, max_logit_change = 0, top1_agreement = 1;
  engine::MemoryStats mem;
  std::vector<double> logits;
  // --profile: as Result's.
  std::vector<engine::KernelTime> kernels;
  int profiled_steps = 0;
  double profiled_step_ms = 0;
};

// Batch-norms as training leaves them rather than fresh (gamma 1, beta 0, mean 0, var 1, which
// would make folding nearly an identity): seeded draws, gamma in [0.5, 1.5], beta and the mean
// in +-0.5, the variance in [0.05, 2].
void trained_like_batch_norms(engine::Module& model) {
  for (const auto& [path, m] : model.named_modules())
    if (auto* bn = dynamic_cast<engine::BatchNorm2d*>(m)) {
      const engine::Shape c = bn->running_mean.shape();
      Tensor(bn->gamma->master).copy_from(engine::uniform(c, 0.5, 1.5, DType::F32));
      Tensor(bn->beta->master).copy_from(engine::uniform(c, -0.5, 0.5, DType::F32));
      bn->running_mean.copy_from(engine::uniform(c, -0.5, 0.5, DType::F32));
      bn->running_var.copy_from(engine::uniform(c, 0.05, 2.0, DType::F32));
    }
  model.refresh_compute_copies();
}

// One warm-up call (algorithm choices, caches; its logits kept in r), then `steps` timed calls of
// forward(): the median's ms and images/s (r.batch images a call), and the timed calls' peak memory.
template <class Forward>
void time_forward(InferenceResult& r, int steps, engine::Device device, bool profile, Forward forward) {
  auto& alloc = engine::allocator_for(device);
  r.logits = forward().to_vector();
  alloc.reset_peak();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const Tensor z = forward();
    if (device.is_cuda()) (void)z.slice0(0, 1).to_vector();  // wait for the device
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  r.ms = median * 1e3;
  r.images_per_s = static_cast<double>(r.batch) / median;
  r.mem = alloc.stats();
  if (profile && device.is_cpu()) {  // after the timed steps, so the timers cost them nothing
    engine::take_kernel_profile();
    engine::set_kernel_profiling(true);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) (void)forward();
    r.profiled_step_ms = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3 / steps;
    engine::set_kernel_profiling(false);
    r.kernels = engine::take_kernel_profile();
    r.profiled_steps = steps;
  }
}

// Evaluation forward passes on one device-resident batch; fold: BN folded into the convs first.
InferenceResult bench_inference(const std::string& name, DType dt, int64_t batch, int steps, engine::Device device,
                                bool fold, bool profile) {
  engine::manual_seed(1);
  auto model = models::make_model(name);
  model->set_compute_dtype(dt);
  model->to(device);
  trained_like_batch_norms(*model);
  model->eval();
  InferenceResult r;
  r.model = name;
  r.precision = engine::dtype_name(dt);
  r.batch = batch;
  r.folded = fold;
  if (fold) r.folded_pairs = engine::fold_batch_norm(*model, dt);
  model->drop_masters_for_inference();  // as predict does: only the weights inference reads
  engine::manual_seed(2);
  const Tensor x = engine::cast(engine::uniform({batch, 32, 32, 3}, -1, 1, DType::F32), dt).to(device);
  engine::NoGradScope no_grad;
  engine::AutocastScope autocast(dt);
  time_forward(r, steps, device, profile, [&] { return (*model)(x); });
  return r;
}

// How far r's logits are from `ref`'s on the same batch of b images: the largest difference and
// the share of images with the same top class.
void compare_logits(InferenceResult& r, const std::vector<double>& ref, int64_t b) {
  const int64_t k = static_cast<int64_t>(ref.size()) / b;
  int64_t same = 0;
  for (int64_t i = 0; i < b; ++i) {
    auto top = [&](const std::vector<double>& z) {
      return std::max_element(z.begin() + i * k, z.begin() + (i + 1) * k) - (z.begin() + i * k);
    };
    same += top(ref) == top(r.logits);
  }
  for (size_t i = 0; i < ref.size(); ++i) r.max_logit_change = std::max(r.max_logit_change, std::fabs(ref[i] - r.logits[i]));
  r.top1_agreement = static_cast<double>(same) / static_cast<double>(b);
}

// The same on the INT8 path: FP32 weights (batch-norms trained-like, then folded) quantized.
InferenceResult bench_int8(const std::string& name, int64_t batch, int steps, int64_t* weight_bytes,
                           int64_t* resident_bytes, bool profile) {
  engine::manual_seed(1);
  auto model = models::make_model(name);
  trained_like_batch_norms(*model);
  engine::manual_seed(3);
  std::vector<Tensor> calibration = {engine::uniform({128, 32, 32, 3}, -1, 1, DType::F32),
                                     engine::uniform({128, 32, 32, 3}, -1, 1, DType::F32)};
  models::Int8Net q = models::quantize_model(*model, name, calibration, engine::CalibrationMethod::Percentile);
  calibration.clear();
  q.release_fp32_weights();  // as predict does: only what INT8 inference reads stays
  model.reset();
  *resident_bytes = q.resident_weight_bytes();
  *weight_bytes = q.weight_bytes();
  InferenceResult r;
  r.model = name;
  r.precision = "int8";
  r.batch = batch;
  r.folded = true;
  engine::manual_seed(2);
  const Tensor x = engine::uniform({batch, 32, 32, 3}, -1, 1, DType::F32);
  time_forward(r, steps, engine::Device::cpu(), profile, [&] { return q.forward_int8(x); });
  return r;
}

// The median of xs (not empty): the mean of the middle two for an even count.
double median_of(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t h = xs.size() / 2;
  return xs.size() % 2 ? xs[h] : (xs[h - 1] + xs[h]) / 2;
}

// "a, b, c".
std::string comma_list(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  return list;
}

// The models the INT8 path covers (Int8Net's step list), on the CPU only.
const std::vector<std::string> kInt8Models = {"simplecnn", "resnet9", "resnet18", "resnet50"};
bool int8_covers(const std::string& model, engine::Device device) {
  return device.is_cpu() && std::find(kInt8Models.begin(), kInt8Models.end(), model) != kInt8Models.end();
}

int run_inference(const std::vector<std::string>& model_names, const std::vector<DType>& dtypes, int64_t batch,
                  int steps, int rounds, bool quick, engine::Device device, bool profile) {
  std::printf("Inference (eval mode, forward only); 'fold': batch-norm folded into the convolutions; img/s: the median\n"
              "of %d rounds, each making and timing every configuration of the model in turn\n", rounds);
  std::printf("%-10s %-5s %-4s %6s %10s %9s %10s %10s %10s %14s %8s\n", "model", "prec", "fold", "batch", "img/s", "ms",
              "peak MiB", "weights", "activ.", "max |dlogit|", "same top1");
  auto mb = [](int64_t x) { return static_cast<double>(x) / (1024.0 * 1024.0); };
  std::vector<std::string> ratios;
  using Key = std::pair<DType, bool>;  // (dtype, folded); INT8 is (I8, true)
  for (const std::string& m : model_names) {
    const int64_t b = batch > 0 ? batch : device.is_cpu() ? (m == "simplecnn" ? 256 : 32) : 256;
    const int s = steps > 0 ? steps : quick ? 2 : (device.is_cpu() ? (m == "simplecnn" ? 10 : 3) : 50);
    std::vector<Key> order;
    for (DType dt : dtypes)
      if (dt != DType::I8)
        for (bool fold : {false, true}) order.push_back({dt, fold});
      else if (int8_covers(m, device))
        order.push_back({DType::I8, true});
      else
        std::printf("(%s: no int8 row: INT8 inference runs on the CPU, for %s)\n", m.c_str(),
                    comma_list(kInt8Models).c_str());
    // Round 0's results (memory, logits) and every round's images/s. The configurations of a
    // round run back to back, so a change of the machine's speed (VMs drift by a third between
    // seconds) reaches them alike; the ratios are the medians of each round's ratios.
    std::map<Key, InferenceResult> by;
    std::map<Key, std::vector<double>> speed;
    std::map<Key, int64_t> weight_bytes, resident;
    for (int round = 0; round < rounds; ++round)
      for (const Key& key : order) {
        if (round > 0 && !by.count(key)) continue;  // a fold with nothing to fold
        InferenceResult r;
        const bool profiled = profile && round == 0;
        if (key.first == DType::I8)
          r = bench_int8(m, b, s, &weight_bytes[key], &resident[key], profiled);
        else
          r = bench_inference(m, key.first, b, s, device, key.second, profiled);
        speed[key].push_back(r.images_per_s);
        if (round > 0) continue;
        if (key.second && key.first != DType::I8 && r.folded_pairs == 0) continue;  // nothing to fold in this model
        if (key.first == DType::I8) {
          if (by.count({DType::F32, false})) compare_logits(r, by.at({DType::F32, false}).logits, b);
        } else if (key.second) {
          compare_logits(r, by.at({key.first, false}).logits, b);  // vs unfolded: same dtype, weights, batch
        }
        by[key] = std::move(r);
      }
    auto has = [&](const Key& k) { return by.count(k) > 0; };
    for (const Key& key : order) {
      if (!has(key)) continue;
      InferenceResult& r = by.at(key);
      r.images_per_s = median_of(speed.at(key));
      r.ms = 1e3 * static_cast<double>(b) / r.images_per_s;
      const bool int8 = key.first == DType::I8;
      // The allocator counts the FP32 layers and the biases; the packed INT8 weights and their
      // per-channel terms live in std::vectors: added to the peak here.
      const int64_t in_allocator = r.mem.at_total_peak[static_cast<int>(engine::MemKind::Weights)];
      const int64_t packed = int8 ? std::max<int64_t>(0, resident.at(key) - in_allocator) : 0;
      const auto& at = r.mem.at_total_peak;
      std::printf("%-10s %-5s %-4s %6lld %10.0f %9.2f %10.1f %10.1f %10.1f", r.model.c_str(), r.precision.c_str(),
                  key.second ? "yes" : "no", static_cast<long long>(b), r.images_per_s, r.ms,
                  mb(r.mem.total_peak + packed),
                  int8 ? mb(weight_bytes.at(key)) : mb(at[static_cast<int>(engine::MemKind::Weights)]),
                  mb(at[static_cast<int>(engine::MemKind::Activations)]));
      if (int8 && !has({DType::F32, false}))
        std::printf(" %14s %8s", "-", "-");  // no FP32 row to compare with
      else if (key.second)
        std::printf(" %14.3g %7.1f%%", r.max_logit_change, 100 * r.top1_agreement);
      std::printf("\n");
    }
    std::fflush(stdout);
    // Each round's ratio, then their median.
    auto speed_ratio = [&](const Key& a, const Key& base) {
      std::vector<double> q;
      for (size_t i = 0; i < speed.at(a).size(); ++i) q.push_back(speed.at(a)[i] / speed.at(base)[i]);
      return median_of(q);
    };
    const Key f32{DType::F32, false}, f16{DType::F16, false}, f16_folded{DType::F16, true}, i8{DType::I8, true};
    auto memory_ratio = [&](const Key& a) { return double(by.at(a).mem.total_peak) / double(by.at(f32).mem.total_peak); };
    char line[256];
    std::string l;
    if (has(f16) && has(f32)) {
      std::snprintf(line, sizeof line, "; fp16 vs fp32: %.2fx speed, %.2fx peak memory", speed_ratio(f16, f32),
                    memory_ratio(f16));
      l += line;
    }
    if (has(f16_folded) && has(f32)) {
      std::snprintf(line, sizeof line, "; fp16 folded vs fp32: %.2fx speed, %.2fx peak memory",
                    speed_ratio(f16_folded, f32), memory_ratio(f16_folded));
      l += line;
    }
    if (has(i8) && has(f32)) {
      std::snprintf(line, sizeof line, "; int8 vs fp32: %.2fx speed", speed_ratio(i8, f32));
      l += line;
      if (has({DType::F32, true})) {
        std::snprintf(line, sizeof line, " (%.2fx fp32 folded)", speed_ratio(i8, {DType::F32, true}));
        l += line;
      }
    }
    if (!l.empty()) {
      std::snprintf(line, sizeof line, "  %-10s ", m.c_str());
      l = line + l.substr(2);
    }
    if (!l.empty()) ratios.push_back(l);
    for (const Key& key : order)
      if (by.count(key) && by.at(key).profiled_steps) {
        const InferenceResult& r = by.at(key);
        print_profile(r.model + " " + r.precision + (key.second ? " folded" : ""), b, r.profiled_steps,
                      r.profiled_step_ms, r.kernels, "outside kernels (allocation, casts)");
      }
  }
  if (!ratios.empty()) std::printf("\nMeasured side by side in this run (the median of the %d rounds' ratios):\n", rounds);
  for (const auto& l : ratios) std::puts(l.c_str());
  return 0;
}

// ---- --memory: counted bytes by kind ---------------------------------------------------------
struct MemoryConfig {
  const char* name;
  DType dtype;
  engine::StateFormat state;
};
const MemoryConfig kMemoryConfigs[] = {{"fp32", DType::F32, engine::StateFormat::F32},
                                       {"fp16", DType::F16, engine::StateFormat::F32},
                                       {"fp16+int8", DType::F16, engine::StateFormat::Int8}};

// Peak bytes by kind over one training step (Adam), after a warm-up step has made the state.
engine::MemoryStats measure_step_memory(const std::string& name, const MemoryConfig& c, int64_t batch,
                                        engine::Device device) {
  engine::manual_seed(1);
  auto model = models::make_model(name);
  model->set_compute_dtype(c.dtype);
  model->to(device);
  engine::Adam opt(model->parameters(), 1e-3);
  opt.set_state_format(c.state);
  engine::LossScalerConfig cfg;
  cfg.enabled = c.dtype == DType::F16;
  cfg.init_scale = 1024;  // no overflow-skipped warm-up step (the state must exist)
  engine::LossScaler scaler(cfg);
  Tensor x, y;
  {
    engine::MemKindScope data(engine::MemKind::Data);
    x = engine::cast(engine::uniform({batch, 32, 32, 3}, -1, 1, DType::F32), c.dtype).to(device);
    std::vector<int32_t> labels(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i) labels[i] = static_cast<int32_t>(i % 10);
    y = Tensor::from_ints(labels, {batch}).to(device);
  }
  auto& alloc = engine::allocator_for(device);
  for (int i = 0; i < 2; ++i) {
    if (i == 1) alloc.reset_peak();
    models::train_step(*model, opt, scaler, x, y, c.dtype, 0.0, 0.0);
  }
  if (device.is_cuda()) (void)opt.params()[0]->master.to_vector();
  return alloc.stats();
}

int run_memory(const std::vector<std::string>& model_names, const std::vector<int64_t>& batches, int64_t budget,
               engine::Device device) {
  auto mib = [](int64_t x) { return static_cast<double>(x) / (1024.0 * 1024.0); };
  std::printf("Peak memory of one training step (Adam), counted bytes by kind, MiB\n");
  std::printf("%-10s %-10s %6s %10s %9s %9s %10s %11s %10s %6s\n", "model", "config", "batch", "peak", "weights",
              "grads", "opt state", "activations", "workspace", "data");
  std::map<std::pair<std::string, std::string>, std::map<int64_t, engine::MemoryStats>> all;
  for (const std::string& m : model_names)
    for (const MemoryConfig& c : kMemoryConfigs)
      for (int64_t b : batches) {
        const engine::MemoryStats st = measure_step_memory(m, c, b, device);
        all[{m, c.name}][b] = st;
        const auto& at = st.at_total_peak;
        auto k = [&](engine::MemKind kind) { return mib(at[static_cast<int>(kind)]); };
        std::printf("%-10s %-10s %6lld %10.1f %9.1f %9.1f %10.1f %11.1f %10.1f %6.1f\n", m.c_str(), c.name,
                    static_cast<long long>(b), mib(st.total_peak), k(engine::MemKind::Weights),
                    k(engine::MemKind::Gradients), k(engine::MemKind::OptimizerState), k(engine::MemKind::Activations),
                    k(engine::MemKind::Workspace), k(engine::MemKind::Data));
        std::fflush(stdout);
      }
  std::puts("\nPeak vs FP32 of the same model and batch (optimizer state alone in brackets):");
  for (const std::string& m : model_names)
    for (int64_t b : batches) {
      const auto& f32 = all[{m, "fp32"}][b];
      const auto& f16 = all[{m, "fp16"}][b];
      const auto& q8 = all[{m, "fp16+int8"}][b];
      const int opt_kind = static_cast<int>(engine::MemKind::OptimizerState);
      std::printf("  %-10s batch %4lld: fp16 %.3fx, fp16+int8 %.3fx (state %.3fx)\n", m.c_str(),
                  static_cast<long long>(b), double(f16.total_peak) / double(f32.total_peak),
                  double(q8.total_peak) / double(f32.total_peak),
                  double(q8.at_total_peak[opt_kind]) / double(f32.at_total_peak[opt_kind]));
    }
  if (batches.size() >= 2) {
    const int64_t b1 = batches[batches.size() - 2], b2 = batches.back();
    std::printf("\nFrom batches %lld and %lld: peak = fixed + per-image x batch; at batch 256, and the largest batch "
                "under %.1f GiB:\n",
                static_cast<long long>(b1), static_cast<long long>(b2), static_cast<double>(budget) / (1 << 30));
    for (const std::string& m : model_names) {
      const double p32 = [&] {
        const auto& r = all[{m, "fp32"}];
        const double per = double(r.at(b2).total_peak - r.at(b1).total_peak) / double(b2 - b1);
        return double(r.at(b1).total_peak) + per * double(256 - b1);
      }();
      for (const MemoryConfig& c : kMemoryConfigs) {
        const auto& r = all[{m, c.name}];
        const double per = double(r.at(b2).total_peak - r.at(b1).total_peak) / double(b2 - b1);
        const double fixed = double(r.at(b1).total_peak) - per * double(b1);
        const double at256 = fixed + per * 256;
        // 0 when not even one image fits; capped at 2^53 so the conversion is defined.
        const double fit = per > 0 ? std::floor((double(budget) - fixed) / per) : 0;
        const int64_t max_batch = static_cast<int64_t>(std::clamp(fit, 0.0, 9007199254740992.0));
        std::printf("  %-10s %-10s fixed %8.1f MiB + %7.2f MiB/image: batch 256 %9.1f MiB (%.3fx fp32), max batch %lld\n",
                    m.c_str(), c.name, fixed / (1 << 20), per / (1 << 20), at256 / (1 << 20), at256 / p32,
                    static_cast<long long>(max_batch));
      }
    }
  }
  return 0;
}

const char* const kUsage =
    "usage: bench_train [--device cpu|cuda] [--models a,b] [--batch N] [--steps N] [--quick] [--inference] [--json FILE]\n"
    "                   [--precisions f32,f16,bf16]   (a subset, e.g. for a profile of one; --inference: also int8)\n"
    "                   [--profile]   (CPU: then ms per step of each kernel, host wall time)\n"
    "                   [--rounds N]  (--inference: times each configuration in N interleaved rounds; 5, --quick 1)\n"
    "       bench_train --memory [--models a,b] [--batches 8,32] [--max-batch-under 80GiB]\n"
    "Defaults: --models simplecnn,resnet9,resnet18; --batch 256 on a GPU, on the CPU 256 for simplecnn and 32\n"
    "for the ResNets; --steps 10 / 3 on the CPU, 30 on a GPU (--quick 2).\n";

struct BenchArgs {
  std::string device = "cpu", json;
  std::vector<std::string> models = {"simplecnn", "resnet9", "resnet18"};
  int64_t batch = 0;  // 0: the per-model default
  int steps = 0;      // 0: the per-model default
  int rounds = 0;     // 0: not given
  bool quick = false, inference = false, memory = false, profile = false, help = false;
  std::vector<int64_t> batches = {8, 32};
  int64_t budget = int64_t(80) << 30;
  std::vector<std::string> precisions;  // empty: the mode's default list
};

// Every value checked here, before anything runs; throws models::UsageError.
BenchArgs parse_bench_args(int argc, char** argv) {
  BenchArgs a;
  bool rounds_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    const size_t eq = flag.find('=');
    const bool inline_value = flag.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) value = flag.substr(eq + 1), flag = flag.substr(0, eq);
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) throw models::UsageError(flag + " needs a value");
      return argv[++i];
    };
    bool* switch_flag = flag == "--quick"       ? &a.quick
                        : flag == "--inference" ? &a.inference
                        : flag == "--memory"    ? &a.memory
                        : flag == "--profile"   ? &a.profile
                                                : nullptr;
    if (flag == "--help" || flag == "-h") {
      a.help = true;
      return a;
    } else if (switch_flag) {
      if (inline_value) throw models::UsageError(flag + " takes no value");
      *switch_flag = true;
    } else if (flag == "--device") {
      a.device = next();
    } else if (flag == "--models") {
      a.models = models::parse_list(flag, next());
      const std::vector<std::string>& known = models::model_names();
      for (const std::string& m : a.models)
        if (std::find(known.begin(), known.end(), m) == known.end())
          throw models::UsageError("--models: unknown model '" + m + "' (known: " + comma_list(known) + ")");
    } else if (flag == "--batch") {
      a.batch = models::parse_int(flag, next(), 1);
    } else if (flag == "--steps") {
      a.steps = static_cast<int>(models::parse_int(flag, next(), 1, 1000000));
    } else if (flag == "--rounds") {
      a.rounds = static_cast<int>(models::parse_int(flag, next(), 1, 1000));
      rounds_given = true;
    } else if (flag == "--json") {
      a.json = next();
      if (a.json.empty()) throw models::UsageError("--json expects a file name");
    } else if (flag == "--batches") {
      a.batches.clear();
      for (const std::string& b : models::parse_list(flag, next())) a.batches.push_back(models::parse_int(flag, b, 1));
      std::sort(a.batches.begin(), a.batches.end());
      a.batches.erase(std::unique(a.batches.begin(), a.batches.end()), a.batches.end());
    } else if (flag == "--precisions") {
      a.precisions = models::parse_list(flag, next());
    } else if (flag == "--max-batch-under") {
      a.budget = models::parse_bytes(flag, next());
    } else {
      throw models::UsageError("unknown option '" + flag + "'");
    }
  }
  if (a.inference && a.memory) throw models::UsageError("--inference and --memory are separate runs");
  if (a.inference && !a.json.empty()) throw models::UsageError("--json is not written for --inference (the table is the output)");
  if (rounds_given && !a.inference) throw models::UsageError("--rounds applies to --inference only");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  BenchArgs args;
  try {
    args = parse_bench_args(argc, argv);
  } catch (const models::UsageError& e) {
    return models::report_usage_error("bench_train", e);
  }
  if (args.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (const int rc = models::report_environment_error()) return rc;
  const std::string& device_spec = args.device;
  const int64_t batch = args.batch;
  const int steps = args.steps;
  const bool quick = args.quick, profile = args.profile;
  try {
    const engine::Device device = engine::parse_device(device_spec);
    // --precisions: names from the mode's list; they run in the order f32, f16, bf16, int8.
    std::vector<std::pair<DType, std::string>> known = {{DType::F32, "f32"}, {DType::F16, "f16"}, {DType::BF16, "bf16"}};
    if (args.inference) known.push_back({DType::I8, "int8"});
    std::vector<std::string> known_names;
    for (const auto& k : known) known_names.push_back(k.second);
    const std::vector<std::string> wanted = args.precisions.empty() ? known_names : args.precisions;
    std::vector<DType> dtypes;
    for (const auto& [dt, name] : known)
      if (std::find(wanted.begin(), wanted.end(), name) != wanted.end()) dtypes.push_back(dt);
    if (dtypes.size() != wanted.size())
      throw models::UsageError("--precisions expects a list of " + comma_list(known_names) + " without repeats, got '" +
                               comma_list(wanted) + "'");
    if (args.inference) {
      // INT8 asked for by name where it gives no row: refused, not an empty table.
      const bool int8_asked = !args.precisions.empty() && dtypes.back() == DType::I8;
      for (const std::string& m : args.models)
        if (int8_asked && !int8_covers(m, device))
          throw models::UsageError("--precisions int8: INT8 inference runs on the CPU, for " + comma_list(kInt8Models) +
                                   " (not " + m + " on " + device_spec + ")");
      return run_inference(args.models, dtypes, batch, steps, args.rounds > 0 ? args.rounds : quick ? 1 : 5, quick,
                           device, profile);
    }
    if (args.memory) {
      return run_memory(args.models, args.batches, args.budget, device);
    }
    // The yardstick for model FLOP/s: the GEMM peak per dtype (the CPU widens 16-bit
    // operands to FP32, so its FP32 peak serves all three).
    std::map<DType, double> peak;
    if (device.is_cpu()) {
      const double p = cpu_gemm_peak_gflops();
      peak = {{DType::F32, p}, {DType::F16, p}, {DType::BF16, p}};
      std::printf("CPU FP32 GEMM peak (1024^3): %.1f GFLOP/s\n", p);
    } else {
      for (DType dt : {DType::F32, DType::F16, DType::BF16}) peak[dt] = cuda_gemm_peak_gflops(dt, device);
      std::printf("GPU GEMM peak (our linear, 4096^3): fp32 %.1f, fp16 %.1f, bf16 %.1f TFLOP/s\n",
                  peak[DType::F32] * 1e-3, peak[DType::F16] * 1e-3, peak[DType::BF16] * 1e-3);
    }
    std::printf("%-10s %-5s %6s %10s %10s %8s %9s %7s %10s %10s %10s %10s\n", "model", "prec", "batch", "img/s", "step ms",
                "epoch s", "GFLOP/s", "%peak", "peak MiB", "weights", "grads+opt", "activ.");
    std::vector<Result> results;
    for (const std::string& m : args.models) {
      // CPU: small batches and few steps keep the big ResNets to seconds.
      const int64_t b = batch > 0 ? batch : device.is_cpu() ? (m == "simplecnn" ? 256 : 32) : 256;
      const int s = steps > 0 ? steps : quick ? 2 : (device.is_cpu() ? (m == "simplecnn" ? 10 : 3) : 30);
      for (DType dt : dtypes) {
        const Result r = bench(m, dt, b, s, device, peak[dt], profile);
        const auto& at = r.mem.at_total_peak;
        auto mb = [](int64_t x) { return static_cast<double>(x) / (1024.0 * 1024.0); };
        std::printf("%-10s %-5s %6lld %10.0f %10.1f %8.1f %9.1f %6.0f%% %10.1f %10.1f %10.1f %10.1f\n", r.model.c_str(),
                    r.precision.c_str(), static_cast<long long>(r.batch), r.images_per_s, r.step_ms, r.epoch_s(), r.gflops,
                    100 * r.peak_fraction, mb(r.mem.total_peak), mb(at[0]), mb(at[1] + at[2]), mb(at[3] + at[4]));
        std::fflush(stdout);
        results.push_back(r);
      }
    }
    if (dtypes.size() == 3) std::puts("\nFP16 / BF16 vs FP32 of the same model, measured in this run:");
    for (size_t i = 0; dtypes.size() == 3 && i + 2 < results.size(); i += 3) {
      const Result &f32 = results[i], &f16 = results[i + 1], &b16 = results[i + 2];
      std::printf("  %-10s fp16: %.2fx speed, %.2fx peak memory   bf16: %.2fx speed, %.2fx peak memory\n",
                  f32.model.c_str(), f16.images_per_s / f32.images_per_s,
                  double(f16.mem.total_peak) / double(f32.mem.total_peak), b16.images_per_s / f32.images_per_s,
                  double(b16.mem.total_peak) / double(f32.mem.total_peak));
    }
    for (const Result& r : results)
      if (r.profiled_steps)
        print_profile(r.model + " " + r.precision, r.batch, r.profiled_steps, r.profiled_step_ms, r.kernels,
                      "outside kernels (tape, allocation)");
    if (!args.json.empty()) {
      FILE* f = std::fopen(args.json.c_str(), "w");
      if (!f) {
        std::fprintf(stderr, "bench_train: cannot write %s\n", args.json.c_str());
        return 1;
      }
      std::fprintf(f, "{\"benchmark\":\"train_step\",\"device\":\"%s\",\"results\":[", device.str().c_str());
      for (size_t i = 0; i < results.size(); ++i) {
        const Result& r = results[i];
        std::fprintf(f, "%s{\"model\":\"%s\",\"precision\":\"%s\",\"batch\":%lld,\"images_per_s\":%.2f,\"step_ms\":%.3f,"
                        "\"epoch_s\":%.3f,\"gflops\":%.2f,\"gemm_peak_gflops\":%.2f,\"peak_fraction\":%.4f,\"peak_bytes\":%lld",
                     i ? "," : "", r.model.c_str(), r.precision.c_str(), static_cast<long long>(r.batch), r.images_per_s,
                     r.step_ms, r.epoch_s(), r.gflops, r.peak_gflops, r.peak_fraction,
                     static_cast<long long>(r.mem.total_peak));
        for (int k = 0; k < engine::kNumMemKinds; ++k)
          std::fprintf(f, ",\"peak_%s\":%lld", engine::mem_kind_name(static_cast<engine::MemKind>(k)),
                       static_cast<long long>(r.mem.at_total_peak[k]));
        if (r.profiled_steps) {
          std::fprintf(f, ",\"profiled_step_ms\":%.3f,\"kernels\":[", r.profiled_step_ms);
          for (size_t k = 0; k < r.kernels.size(); ++k)
            std::fprintf(f, "%s{\"name\":\"%s\",\"calls_per_step\":%.2f,\"ms_per_step\":%.3f}", k ? "," : "",
                         r.kernels[k].name.c_str(), double(r.kernels[k].calls) / r.profiled_steps,
                         r.kernels[k].seconds * 1e3 / r.profiled_steps);
          std::fprintf(f, "]");
        }
        std::fprintf(f, "}");
      }
      std::fprintf(f, "]}\n");
      std::fclose(f);
    }
  } catch (const models::UsageError& e) {
    return models::report_usage_error("bench_train", e);
  } catch (const engine::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 1;
  }
  return 0;
}

// The trainer's command line: its settings with their defaults, the --help text, and the
// parser (which throws UsageError, never exits: tests/fuzz/targets.h runs it on any input).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cli.h"

namespace models {

struct TrainerConfig {
  ArgsAction action = ArgsAction::Run;  // --help, --version: print and exit 0
  std::string model = "simplecnn";
  std::string precision = "fp16";
  std::string device = "auto";
  std::string data;                 // empty: the default folder, synthetic data when absent
  std::string cache = "cache";
  std::string recipe;               // "" or airbench94: its defaults, each flag still overriding
  double epochs = 10;               // fractional: ceil(epochs x steps per epoch) steps in all
  bool drop_last = false;           // drop an epoch's last, smaller batch (airbench does)
  int64_t batch_size = 256;
  int64_t accumulate = 1;           // micro-batches per optimizer step
  std::string optimizer = "adam";
  std::string optimizer_state = "fp32";  // how momentum / Adam's moments are stored
  double lr = 1e-3;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::string lr_schedule = "constant";
  double warmup = 0.2;              // one-cycle, triangle: fraction of steps to the peak
  double lr_start = 0.0;            // triangle: the factor at the first step
  double lr_end = 0.0;              // triangle: the factor at the last
  double label_smoothing = 0.0;
  std::string loss_reduction = "mean";  // or sum over the batch
  double norm_lr_scale = 1.0;       // batch-norm parameters' group: lr x this
  double norm_weight_decay = -1.0;  // and this weight decay (< 0: --weight-decay)
  std::vector<std::pair<std::string, double>> freeze_after;  // parameter, epochs it trains for
  int64_t whiten_images = 5000;     // airbench94: images the whitening layer is computed from
  bool whiten = true;               // airbench94: false learns the first layer from its default init
  bool dirac = true;                // airbench94: false leaves the 3x3 convolutions at the default init
  double clip_grad_norm = 0.0;      // 0: no clipping
  bool augment = false;
  int64_t crop_pad = 4;             // --augment: random crops from the image padded this much
  std::string pad_mode = "zeros";   // or reflect
  std::string flip = "random";      // or alternating, or none
  bool ema = false;                 // the weight average (lookahead)
  int64_t ema_every = 5;            // steps between its updates
  double ema_rate = 0.95;           // per step: decay rate^every x (step / total)^3
  bool tta = false;                 // test-time augmentation in the final evaluation
  double init_scale = 65536.0;
  int64_t growth_interval = 2000;
  uint64_t seed = 0;
  std::string checkpoint, resume, log;
  int64_t checkpoint_every = 0;     // also save every N optimizer steps (0: at epoch ends only)
  std::vector<std::string> args;    // the command line, for the resume hint after a stop
  std::string export_path;          // --export: the --resume checkpoint as safetensors
  std::string export_dtype = "fp32";  // or int8: post-training quantization (models/int8_net.h)
  int64_t calibrate = 512;          // --export-dtype int8: calibration images from the training set
  std::string calibration_method = "percentile";
  std::string init_from;            // starting weights from a safetensors file
  bool eval_only = false;
  int64_t subset = 0;               // 0: the whole training set
  int64_t test_subset = 0;          // 0: the whole test set
  int64_t max_steps = 0;            // 0: run all epochs
  bool synthetic = false;           // force the synthetic stand-in
  int64_t synthetic_size = 10000;
  int threads = 0;                  // 0: OpenMP's default
  int64_t log_every = 100;
  bool deterministic = false;       // CUDA: deterministic cuDNN algorithms only
  int64_t inspect_numerics = 0;     // range report every N steps (0: off)
  std::string detect_anomaly;       // "", "on" or "strict"
  std::vector<std::string> fp32_layers;
  bool sync_bn = false;             // data-parallel: batch statistics over all ranks
  double timeout = 300;             // data-parallel: seconds a collective may wait
};

extern const char* const kTrainerUsage;

// argv[0] is the program; the rest are flags as `trainer --help` lists them.
TrainerConfig parse_trainer_args(int argc, const char* const* argv);

}  // namespace models

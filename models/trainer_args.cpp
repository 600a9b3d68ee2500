// The trainer's command line (models/trainer_args.h): every flag, its check and its default.
#include "models/trainer_args.h"

#include "models/models.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace models {

namespace {

[[noreturn]] void usage_error(const std::string& msg) { throw UsageError(msg); }

// airbench94 (Keller Jordan, arXiv 2404.00498) as its package defines it, the values below
// derived from its hyperparameters as it derives them. They are given per 1,024 examples
// (lr 11.5, weight decay 0.0153) for a loss summed over the batch with Nesterov momentum
// 0.85, so SGD sees lr = 11.5 / (1024 (1 + 1/(1 - 0.85))) = 1.465e-3 and plain L2 decay of
// 0.0153 x 1024 / 11.5 = 1.362 at that lr; batch-norm biases learn 64x faster with decay
// 1.362 / 64 = 0.0213 (the same decay per step). 50,000 / 1,024 = 48 whole batches an epoch
// (the rest dropped), ceil(48 x 9.9) = 476 steps.
constexpr double kAirbenchMomentum = 0.85, kAirbenchLrPer1024 = 11.5, kAirbenchDecayPer1024 = 0.0153,
                 kAirbenchNormLrScale = 64;

// airbench94's decay at SGD's lr grows with the batch (the loss is summed, so the lr per step
// is fixed while each step decays once for the whole batch): 0.0153 x batch / 11.5.
double airbench_weight_decay(int64_t batch_size) {
  return kAirbenchDecayPer1024 * static_cast<double>(batch_size) / kAirbenchLrPer1024;
}

void apply_recipe(TrainerConfig& c, const std::string& name) {
  if (name != "airbench94") usage_error("--recipe must be airbench94, got '" + name + "'");
  c.recipe = name;
  c.model = "airbench94";
  c.optimizer = "sgd";
  c.momentum = kAirbenchMomentum;
  c.nesterov = true;
  c.batch_size = 1024;
  c.epochs = 9.9;
  c.drop_last = true;
  c.lr = kAirbenchLrPer1024 / (1024 * (1 + 1 / (1 - kAirbenchMomentum)));
  c.norm_lr_scale = kAirbenchNormLrScale;  // the decays follow the effective batch: set after parsing
  c.label_smoothing = 0.2;
  c.loss_reduction = "sum";
  c.lr_schedule = "triangle";  // 0.2 at the start, 1 at 23% of the steps, 0.07 at the end
  c.lr_start = 0.2;
  c.warmup = 0.23;
  c.lr_end = 0.07;
  c.augment = true;
  c.crop_pad = 2;
  c.pad_mode = "reflect";
  c.flip = "alternating";
  c.ema = true;
  c.ema_every = 5;
  c.ema_rate = 0.95;
  c.tta = true;
  c.freeze_after = {{"0.bias", 3.0}};  // the whitening layer's bias trains for 3 epochs
  c.whiten_images = 5000;
  // FP16 with a summed loss: the gradients are 1,024 times a mean loss's, so the usual 65,536
  // overflows at once: from there the scaler backs off four times, skipping the first four
  // steps, and first steps clean at 4,096 (measured at 232a5e6). One halving below that, so
  // the first steps are not skipped (docs/airbench.md).
  c.init_scale = 2048;
}

}  // namespace

const char* const kTrainerUsage = R"(usage: trainer [options]

Trains a CNN on CIFAR-10 with mixed precision. Defaults reproduce the classic recipe:
simplecnn, Adam lr 1e-3, batch 256, 10 epochs, FP16 with the dynamic loss scaler,
pixels normalised to [-1, 1]. A flag the other flags make pointless (--warmup with a
constant schedule, --init-scale outside fp16, --flip without --augment) is refused.

Recipes (each sets the flags below to its values; a flag given as well overrides its value):
  --recipe airbench94     airbench94 (arXiv 2404.00498; docs/airbench.md): --model airbench94,
                          whitening from 5,000 images, SGD Nesterov 0.85, batch 1024, 9.9
                          epochs, summed loss with label smoothing 0.2, lr 1.465e-3 and decay
                          1.362 (batch-norm biases x64 and 0.0213), triangle schedule 0.2 ->
                          1 at 23% -> 0.07, reflect-pad 2 crops, alternating flips, --ema,
                          --tta, the whitening bias frozen after 3 epochs; prints
                          "TTA accuracy XX.XX% in N s". With another effective batch
                          (--batch-size x --accumulate) the decays follow it (0.0153 x
                          batch / 11.5) unless given; nothing else is re-derived (the lr
                          per step stays: the loss is summed). --no-ema, --no-tta turn
                          those off
Model and precision:
  --model NAME            simplecnn | resnet9 | resnet18 | resnet50 | efficientnet_b0 |
                          airbench94                                 [simplecnn]
  --precision P           fp32 | fp16 | bf16                         [fp16]
  --device D              auto | cpu | cuda | cuda:N                 [auto]
Data:
  --data DIR              CIFAR-10 binary batches or train/ + test/ image folders
                          [data/cifar10 in the source tree; synthetic data when absent]
  --cache DIR             where decoded image folders are cached     [cache]
  --subset N              train on the first N images (class-balanced) [all]
  --test-subset N         evaluate on the first N test images (class-balanced; N above
                          the set's size: all of it)                 [all]
  --synthetic             use the built-in synthetic data set even if CIFAR-10 is there
  --synthetic-size N      training images of the synthetic stand-in  [10000]
  --augment               random crops and horizontal flips          [off]
  --crop-pad N            --augment: crops from the image padded by N [4]
  --pad-mode M            zeros | reflect: what the padding holds     [zeros]
  --flip F                random | alternating (a coin per image, then every odd epoch all
                          flipped) | none                            [random]
  --drop-last             drop each epoch's last, smaller batch       [off]
Optimisation:
  --epochs X              [10]; fractional: ceil(X x steps per epoch) steps in all
  --batch-size N          [256] (global)
  --accumulate K          K micro-batches of --batch-size per optimizer step (the effective
                          batch is K x --batch-size in the memory of one): losses scaled by
                          each micro-batch's share, gradients summed in the compute copies,
                          one unscale / inf check / skip / scale update per step  [1]
  --optimizer O           sgd | adam | adamw                         [adam]
  --lr X                  [1e-3]        --momentum X          [0.9] (sgd)
  --optimizer-state S     fp32 | bf16 | int8: how momentum and Adam's moments are stored;
                          int8 = block-wise quantised (256 values per FP32 absmax, log
                          codes), about a quarter of fp32's bytes; the update is FP32 [fp32]
  --nesterov              Nesterov momentum (sgd)
  --weight-decay X        [0]           --label-smoothing X   [0]
  --loss-reduction R      mean | sum over the batch                  [mean]
  --norm-lr-scale X       batch-norm parameters learn at lr x X      [1]
  --norm-weight-decay X   and decay with X                           [--weight-decay]
  --freeze-after P=E      parameter P (as --fp32-layers names layers, e.g. 0.bias) trains
                          for the first E epochs, then stays as it is (repeatable; a
                          parameter named again takes the later E, the recipe's included)
  --lr-schedule S         constant | onecycle (linear warm-up, then linear decay) |
                          triangle (--lr-start at the first step, 1 at --warmup, --lr-end
                          at the last, linear between)               [constant]
  --warmup X              one-cycle / triangle: the peak's fraction of all steps [0.2]
  --lr-start X            --lr-end X     triangle: the lr factors at both ends [0, 0]
  --ema                   a weight average (lookahead): every --ema-every steps the weights
                          and batch-norm statistics become avg = d avg + (1 - d) w with
                          d = rate^every x (step / total)^3; at the end the weights are the
                          average                                    [off; --no-ema]
  --ema-every N           [5]           --ema-rate X          [0.95]
  --clip-grad-norm X      clip the unscaled gradients to this global L2 norm [off]
Loss scaling (fp16):
  --init-scale X          [65536]       --growth-interval N   [2000]
Data-parallel (launch with mpirun -np N; one process per device, docs in docs/data-parallel.md):
  --batch-size stays the GLOBAL batch: each of N ranks takes an equal shard of it
  --sync-bn               batch-norm statistics over all ranks' shards  [per rank]
  --timeout S             seconds a collective may wait for the other ranks before the job
                          ends with an error naming the rank             [300]
Runs:
  --seed N                initialisation, data order, augmentation, dropout [0]
  --checkpoint FILE       save after every epoch (and at --max-steps, and on SIGTERM/SIGINT)
  --checkpoint-every N    also save every N optimizer steps: what a SIGKILL can cost [off]
  --resume FILE           continue from a checkpoint (bit-identical on the CPU)
  --eval-only             evaluate the --resume checkpoint on the test set and exit
  --export FILE           write the --resume checkpoint's weights as safetensors under
                          PyTorch's names and layouts (bench/pytorch_models.py) and exit
  --export-dtype P        fp32 | fp16 | bf16, rounded once from the FP32 masters; int8:
                          post-training quantization (docs/quantization.md), for predict
                          on the CPU                                 [fp32]
  --calibrate N           int8: activation ranges from N training images of --data (every
                          size/N-th), batch-norm folded, in FP32     [512]
  --calibration-method M  int8: percentile (99.99th of |x|) | entropy (KL, as TensorRT) |
                          minmax                                     [percentile]
  --init-from FILE        start from the weights of a safetensors file (exported here, or
                          a PyTorch state_dict of the matching bench/pytorch_models.py model)
  --max-steps N           stop after N optimizer steps in total (the schedules still span
                          --epochs, so a resumed run continues them exactly)
  --tta                   the final evaluation with test-time augmentation: the logits are
                          0.5 x the mean over the image and its mirror + 0.5 x the mean over
                          two translated views (reflect-pad 1, crops at (0,0) and (2,2)),
                          each mirror-averaged                       [off; --no-tta]
  --whiten-images N       airbench94: the whitening layer from N training images [5000]
  --no-whiten             airbench94 ablation: the first layer learned from the default init
  --no-dirac              airbench94 ablation: the 3x3 convolutions not started as identities
  --log FILE              metrics as JSON lines
  --log-every N           progress line every N steps                [100]
  --threads N             CPU threads                                [all cores]
  --deterministic         CUDA: only deterministic cuDNN algorithms, so a run repeats bit
                          for bit (the CPU always does)              [off]
Numerics (docs/numerics.md):
  --inspect-numerics N    every N steps (from the first), a per-layer table of how each
                          layer's output and each parameter's gradient sit against FP16's
                          edges: absmax, zeros, subnormals, values that flush to zero in
                          FP16 as stored and without the loss scale, near overflow, inf/NaN;
                          also as JSON lines in --log (bench/plot_numerics.py draws them)
                          [off: costs nothing]
  --detect-anomaly[=strict]  check every op's output in forward and backward for inf/NaN
                          and stop at the first with one error naming the op, the layer,
                          dtype, shape, step and loss scale. Costs a host read per op. With
                          the loss scaler, a backward overflow is only a note (the scaler
                          skips that step) unless =strict
  --fp32-layers A,B       run these layers (names as the report prints them) in FP32 inside
                          an FP16/BF16 model: FP32 weights, casts at the layers' edges
  --version               build and library versions (loaded vs built with) and exit
  --help                  this text

Stopping: SIGTERM or SIGINT (Ctrl-C) finishes the step in flight, saves a checkpoint (to
--checkpoint, or interrupted-MODEL.ckpt when none was given), prints how to resume and exits
with 128 + the signal's number (143, 130); a second signal exits at once, leaving the last
checkpoint whole. Under mpirun every rank stops at the same step and rank 0 writes.
)";

TrainerConfig parse_trainer_args(int argc, const char* const* argv) {
  TrainerConfig c;
  c.args.assign(argv, argv + argc);
  std::map<std::string, std::function<void(const std::string&)>> valued;
  auto to_int = [](const std::string& flag, const std::string& v, int64_t lo) { return parse_int(flag, v, lo); };
  auto to_double = [](const std::string& flag, const std::string& v, double lo, bool lo_open) {
    return parse_number(flag, v, lo, lo_open);
  };
  auto choice = [](const std::string& flag, const std::string& v, std::initializer_list<const char*> ok) {
    return parse_choice(flag, v, std::vector<std::string>(ok.begin(), ok.end()));
  };
  valued["--model"] = [&](const std::string& v) {
    c.model = parse_choice("--model", v, model_names());
  };
  valued["--precision"] = [&](const std::string& v) { c.precision = choice("--precision", v, {"fp32", "fp16", "bf16"}); };
  valued["--device"] = [&](const std::string& v) { c.device = v; };
  valued["--data"] = [&](const std::string& v) { c.data = v; };
  valued["--cache"] = [&](const std::string& v) { c.cache = v; };
  valued["--recipe"] = [&](const std::string& v) {
    if (v != c.recipe) usage_error("--recipe given twice ('" + c.recipe + "' and '" + v + "')");
  };
  valued["--epochs"] = [&](const std::string& v) {
    c.epochs = to_double("--epochs", v, 0, true);
    if (c.epochs > 1e6) usage_error("--epochs expects at most 1e6, got '" + v + "'");
  };
  valued["--loss-reduction"] = [&](const std::string& v) { c.loss_reduction = choice("--loss-reduction", v, {"mean", "sum"}); };
  valued["--norm-lr-scale"] = [&](const std::string& v) { c.norm_lr_scale = to_double("--norm-lr-scale", v, 0, true); };
  valued["--norm-weight-decay"] = [&](const std::string& v) {
    c.norm_weight_decay = to_double("--norm-weight-decay", v, 0, false);
  };
  valued["--freeze-after"] = [&](const std::string& v) {
    const size_t eq = v.rfind('=');
    if (eq == std::string::npos || eq == 0) usage_error("--freeze-after expects PARAMETER=EPOCHS, got '" + v + "'");
    // A parameter named again (by the command line after the recipe, or twice) takes the
    // newer epochs, so the recipe's value is overridden like any other flag's.
    const std::string name = v.substr(0, eq);
    const double epochs = to_double("--freeze-after", v.substr(eq + 1), 0, false);
    auto& list = c.freeze_after;
    list.erase(std::remove_if(list.begin(), list.end(), [&](const auto& entry) { return entry.first == name; }), list.end());
    list.emplace_back(name, epochs);
  };
  valued["--lr-start"] = [&](const std::string& v) { c.lr_start = to_double("--lr-start", v, 0, false); };
  valued["--lr-end"] = [&](const std::string& v) { c.lr_end = to_double("--lr-end", v, 0, false); };
  valued["--crop-pad"] = [&](const std::string& v) { c.crop_pad = parse_int("--crop-pad", v, 0, 31); };
  valued["--pad-mode"] = [&](const std::string& v) { c.pad_mode = choice("--pad-mode", v, {"zeros", "reflect"}); };
  valued["--flip"] = [&](const std::string& v) { c.flip = choice("--flip", v, {"random", "alternating", "none"}); };
  valued["--ema-every"] = [&](const std::string& v) { c.ema_every = to_int("--ema-every", v, 1); };
  valued["--ema-rate"] = [&](const std::string& v) {
    c.ema_rate = to_double("--ema-rate", v, 0, false);
    if (c.ema_rate > 1) usage_error("--ema-rate expects a number from 0 to 1, got '" + v + "'");
  };
  valued["--whiten-images"] = [&](const std::string& v) { c.whiten_images = to_int("--whiten-images", v, 1); };
  valued["--batch-size"] = [&](const std::string& v) { c.batch_size = to_int("--batch-size", v, 1); };
  valued["--optimizer"] = [&](const std::string& v) { c.optimizer = choice("--optimizer", v, {"sgd", "adam", "adamw"}); };
  valued["--optimizer-state"] = [&](const std::string& v) {
    c.optimizer_state = choice("--optimizer-state", v, {"fp32", "bf16", "int8"});
  };
  valued["--lr"] = [&](const std::string& v) { c.lr = to_double("--lr", v, 0, true); };
  valued["--momentum"] = [&](const std::string& v) { c.momentum = to_double("--momentum", v, 0, false); };
  valued["--weight-decay"] = [&](const std::string& v) { c.weight_decay = to_double("--weight-decay", v, 0, false); };
  valued["--lr-schedule"] = [&](const std::string& v) {
    c.lr_schedule = choice("--lr-schedule", v, {"constant", "onecycle", "triangle"});
  };
  valued["--warmup"] = [&](const std::string& v) { c.warmup = to_double("--warmup", v, 0, false); };
  valued["--label-smoothing"] = [&](const std::string& v) { c.label_smoothing = to_double("--label-smoothing", v, 0, false); };
  valued["--init-scale"] = [&](const std::string& v) { c.init_scale = to_double("--init-scale", v, 0, true); };
  valued["--clip-grad-norm"] = [&](const std::string& v) { c.clip_grad_norm = to_double("--clip-grad-norm", v, 0, true); };
  valued["--growth-interval"] = [&](const std::string& v) { c.growth_interval = to_int("--growth-interval", v, 1); };
  valued["--seed"] = [&](const std::string& v) { c.seed = static_cast<uint64_t>(to_int("--seed", v, 0)); };
  valued["--checkpoint"] = [&](const std::string& v) { c.checkpoint = v; };
  valued["--resume"] = [&](const std::string& v) { c.resume = v; };
  valued["--checkpoint-every"] = [&](const std::string& v) { c.checkpoint_every = to_int("--checkpoint-every", v, 1); };
  valued["--export"] = [&](const std::string& v) { c.export_path = v; };
  valued["--export-dtype"] = [&](const std::string& v) { c.export_dtype = choice("--export-dtype", v, {"fp32", "fp16", "bf16", "int8"}); };
  bool calibration_flags = false;
  valued["--calibrate"] = [&](const std::string& v) {
    c.calibrate = to_int("--calibrate", v, 1);
    calibration_flags = true;
  };
  valued["--calibration-method"] = [&](const std::string& v) {
    calibration_flags = true;
    c.calibration_method = choice("--calibration-method", v, {"percentile", "entropy", "minmax"});
  };
  valued["--init-from"] = [&](const std::string& v) { c.init_from = v; };
  valued["--log"] = [&](const std::string& v) { c.log = v; };
  valued["--subset"] = [&](const std::string& v) { c.subset = to_int("--subset", v, 1); };
  valued["--test-subset"] = [&](const std::string& v) { c.test_subset = to_int("--test-subset", v, 1); };
  valued["--max-steps"] = [&](const std::string& v) { c.max_steps = to_int("--max-steps", v, 1); };
  valued["--synthetic-size"] = [&](const std::string& v) { c.synthetic_size = to_int("--synthetic-size", v, 10); };
  valued["--threads"] = [&](const std::string& v) { c.threads = static_cast<int>(parse_int("--threads", v, 1, kMaxThreads)); };
  valued["--accumulate"] = [&](const std::string& v) { c.accumulate = to_int("--accumulate", v, 1); };
  valued["--timeout"] = [&](const std::string& v) { c.timeout = to_double("--timeout", v, 0, true); };
  valued["--log-every"] = [&](const std::string& v) { c.log_every = to_int("--log-every", v, 1); };
  valued["--inspect-numerics"] = [&](const std::string& v) { c.inspect_numerics = to_int("--inspect-numerics", v, 1); };
  valued["--fp32-layers"] = [&](const std::string& v) {
    std::stringstream ss(v);
    for (std::string name; std::getline(ss, name, ',');)
      if (!name.empty()) c.fp32_layers.push_back(name);
    if (c.fp32_layers.empty()) usage_error("--fp32-layers expects layer names, got '" + v + "'");
  };
  // A recipe sets its defaults first, wherever it stands, so every other flag overrides it.
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--recipe" && i + 1 < argc) apply_recipe(c, argv[i + 1]);
    if (arg.rfind("--recipe=", 0) == 0) apply_recipe(c, arg.substr(9));
    if (arg == "--help" || arg == "-h" || arg == "--version") break;
  }
  std::set<std::string> given;  // the flags on the command line, for a recipe's derived values
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const size_t eq = arg.find('=');
    const bool inline_value = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    if (arg == "--help" || arg == "-h") {
      c.action = ArgsAction::Help;
      return c;
    } else if (arg == "--version") {
      c.action = ArgsAction::Version;
      return c;
    } else if (arg == "--detect-anomaly") {
      if (inline_value && value != "strict") usage_error("--detect-anomaly takes no value or =strict, got '" + value + "'");
      c.detect_anomaly = inline_value ? "strict" : "on";
    } else if (arg == "--nesterov" || arg == "--augment" || arg == "--eval-only" || arg == "--no-augment" ||
               arg == "--synthetic" || arg == "--deterministic" || arg == "--sync-bn" || arg == "--drop-last" ||
               arg == "--ema" || arg == "--tta" || arg == "--no-ema" || arg == "--no-tta" || arg == "--no-whiten" ||
               arg == "--no-dirac") {
      if (inline_value) usage_error(arg + " takes no value");
      given.insert(arg);
      if (arg == "--no-whiten") c.whiten = false;
      if (arg == "--no-dirac") c.dirac = false;
      if (arg == "--drop-last") c.drop_last = true;
      if (arg == "--ema" || arg == "--no-ema") c.ema = arg == "--ema";
      if (arg == "--tta" || arg == "--no-tta") c.tta = arg == "--tta";
      if (arg == "--nesterov") c.nesterov = true;
      if (arg == "--augment") c.augment = true;
      if (arg == "--no-augment") c.augment = false;
      if (arg == "--eval-only") c.eval_only = true;
      if (arg == "--synthetic") c.synthetic = true;
      if (arg == "--deterministic") c.deterministic = true;
      if (arg == "--sync-bn") c.sync_bn = true;
    } else if (valued.count(arg)) {
      if (!inline_value) {
        if (i + 1 >= argc) usage_error(arg + " needs a value");
        value = argv[++i];
      }
      valued[arg](value);
      given.insert(arg);
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (c.recipe == "airbench94") {  // the values it derives from flags given anywhere
    // The summed loss adds each micro-batch's gradients: one step decays for all K x batch.
    if (!given.count("--weight-decay")) c.weight_decay = airbench_weight_decay(c.batch_size * c.accumulate);
    if (!given.count("--norm-weight-decay")) c.norm_weight_decay = c.weight_decay / c.norm_lr_scale;
  }
  // A flag that the chosen configuration would ignore is refused, not silently dropped.
  const struct {
    std::initializer_list<const char*> flags;
    bool applies;
    const char* where;
  } applies_only[] = {
      {{"--lr-start", "--lr-end"}, c.lr_schedule == "triangle", "--lr-schedule triangle"},
      {{"--warmup"}, c.lr_schedule != "constant", "--lr-schedule onecycle or triangle"},
      {{"--ema-every", "--ema-rate"}, c.ema, "--ema"},
      {{"--init-scale", "--growth-interval"}, c.precision == "fp16", "--precision fp16 (the loss scaler)"},
      {{"--crop-pad", "--pad-mode", "--flip"}, c.augment, "--augment"},
      {{"--momentum"}, c.optimizer == "sgd", "--optimizer sgd"},
      {{"--no-whiten", "--no-dirac"}, c.model == "airbench94", "--model airbench94"},
      {{"--whiten-images"}, c.model == "airbench94" && c.whiten, "--model airbench94 and its whitening layer"},
  };
  for (const auto& rule : applies_only)
    for (const char* flag : rule.flags)
      if (given.count(flag) && !rule.applies) usage_error(std::string(flag) + " applies to " + rule.where + " only");
  if (c.eval_only && c.resume.empty()) usage_error("--eval-only needs --resume FILE");
  if (c.checkpoint_every > 0 && c.checkpoint.empty()) usage_error("--checkpoint-every needs --checkpoint FILE");
  if (!c.export_path.empty() && c.resume.empty()) usage_error("--export needs --resume FILE (the checkpoint to export)");
  if (!c.export_path.empty() && c.eval_only) usage_error("--export and --eval-only are separate runs");
  if (c.export_path.empty() && c.export_dtype != "fp32") usage_error("--export-dtype applies to --export only");
  if (c.export_dtype != "int8" && calibration_flags)
    usage_error("--calibrate and --calibration-method apply to --export-dtype int8 only");
  if (!c.export_path.empty() && (c.export_path == c.resume || c.export_path == c.checkpoint))
    usage_error("--export FILE must not overwrite the checkpoint it reads");
  if (!c.init_from.empty() && !c.resume.empty()) usage_error("--init-from starts a new run; --resume continues one: give one");
  if (c.nesterov && c.optimizer != "sgd") {  // the recipe's Nesterov goes with its SGD
    if (given.count("--nesterov")) usage_error("--nesterov applies to --optimizer sgd only");
    c.nesterov = false;
  }
  if (c.nesterov && c.momentum == 0) usage_error("--nesterov needs --momentum > 0");
  if (c.label_smoothing >= 1) usage_error("--label-smoothing must be below 1");
  if (c.warmup >= 1) usage_error("--warmup must be below 1");
  if (c.lr_schedule == "triangle" && c.warmup <= 0) usage_error("--lr-schedule triangle needs --warmup above 0");
  return c;
}


}  // namespace models

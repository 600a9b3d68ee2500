// predict's command line (models/predict_args.h).
#include "models/predict_args.h"

#include <algorithm>

#include "models/models.h"

namespace models {

namespace {

[[noreturn]] void usage_error(const std::string& msg) { throw UsageError(msg); }

}  // namespace

const char* const kPredictUsage = R"(usage: predict --weights FILE [options] IMAGE|DIR [IMAGE|DIR ...]

Classifies 32x32 PNG or JPEG images with a trained model and prints the top classes with
their probabilities (softmax in FP32). Directories are searched recursively for .png, .jpg
and .jpeg files. When an image sits in a folder named after a class (test/cat/0001.png), the
accuracy over those images is printed at the end.

  --weights FILE          model.safetensors from `trainer --export` (or a PyTorch state_dict
                          of bench/pytorch_models.py's model), or a trainer checkpoint; an
                          INT8 file (trainer --export-dtype int8) runs in INT8
  --model NAME            simplecnn | resnet9 | resnet18 | resnet50 | efficientnet_b0 |
                          airbench94                    [the file's own; else simplecnn]
  --precision P           fp32 | fp16 | bf16 | int8: the inference dtype     [fp32]
                          int8 (CPU only) on FP32 weights quantizes them on the fly,
                          calibrated on --calibration-data
  --calibration-data DIR  int8: images (searched recursively, sorted by path) whose every
                          count/N-th image calibrates the activation ranges
  --calibrate N           int8: how many of them                     [512]
  --calibration-method M  int8: percentile | entropy | minmax        [percentile]
  --device D              auto | cpu | cuda | cuda:N                         [auto]
  --top-k K               classes shown per image, 1 to the model's classes  [3]
  --resize                scale other sizes to 32x32 with bilinear filtering (half-pixel
                          centres, no antialiasing: shrinking by more than 2x aliases)
                          [off: images that are not 32x32 are refused]
  --batch-size N          images per forward pass                            [256]
  --fold-bn               fold each batch-norm into the convolution before it (inference
                          only; bench_train --inference measures what it changes) [off]
  --json                  one JSON object per image (top-k, probabilities, logits)
  --tta                   test-time augmentation: the logits are 0.5 x the mean over the
                          image and its mirror + 0.5 x the mean over two views shifted by
                          one pixel (reflection padding), each mirror-averaged (the
                          trainer's --tta; not with int8)
  --threads N             CPU threads                                        [all cores]
  --help                  this text

Pixels are normalised as in training: (pixel / 255 - 0.5) / 0.5, RGB (airbench94: by
CIFAR-10's channel means and standard deviations).
)";



PredictOptions parse_predict_args(int argc, const char* const* argv) {
  PredictOptions o;
  bool calibration_flags = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const bool is_flag = arg.rfind("--", 0) == 0;
    const size_t eq = arg.find('=');
    const bool inline_value = is_flag && eq != std::string::npos;
    if (inline_value) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto next = [&]() -> std::string {
      if (inline_value) return value;
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      o.action = ArgsAction::Help;
      return o;
    } else if (arg == "--resize" || arg == "--json" || arg == "--fold-bn" || arg == "--tta") {
      if (inline_value) usage_error(arg + " takes no value");
      (arg == "--resize" ? o.resize : arg == "--json" ? o.json : arg == "--tta" ? o.tta : o.fold_bn) = true;
    } else if (arg == "--weights") {
      o.weights = next();
    } else if (arg == "--model") {
      o.model = parse_choice(arg, next(), models::model_names());
    } else if (arg == "--precision") {
      o.precision = next();
      if (o.precision != "fp32" && o.precision != "fp16" && o.precision != "bf16" && o.precision != "int8")
        usage_error("--precision must be one of fp32, fp16, bf16, int8, got '" + o.precision + "'");
    } else if (arg == "--calibration-data") {
      o.calibration_data = next();
      calibration_flags = true;
    } else if (arg == "--calibrate") {
      o.calibrate = parse_int(arg, next(), 1);
      calibration_flags = true;
    } else if (arg == "--calibration-method") {
      o.calibration_method = next();
      calibration_flags = true;
      if (o.calibration_method != "percentile" && o.calibration_method != "entropy" && o.calibration_method != "minmax")
        usage_error("--calibration-method must be one of percentile, entropy, minmax, got '" + o.calibration_method + "'");
    } else if (arg == "--device") {
      o.device = next();
    } else if (arg == "--top-k") {
      o.top_k = parse_int(arg, next(), 1);
    } else if (arg == "--batch-size") {
      o.batch_size = parse_int(arg, next(), 1);
    } else if (arg == "--threads") {
      o.threads = static_cast<int>(parse_int(arg, next(), 1, kMaxThreads));
    } else if (is_flag || arg == "-") {
      usage_error("unknown option '" + arg + "'");
    } else {
      o.inputs.push_back(arg);
    }
  }
  if (o.weights.empty()) usage_error("--weights FILE is required");
  if (o.inputs.empty()) usage_error("give at least one image or folder");
  o.calibration_given = calibration_flags;
  if (calibration_flags && o.precision != "int8")
    usage_error("--calibration-data, --calibrate and --calibration-method apply to --precision int8 only");
  if (o.tta && o.precision == "int8") usage_error("--tta is for fp32, fp16 and bf16 inference, not int8");
  return o;
}

}  // namespace models

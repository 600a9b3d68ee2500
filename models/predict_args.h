// predict's command line: its options, the --help text, and the parser (which throws
// UsageError, never exits: tests/fuzz/targets.h runs it on any input).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/cli.h"

namespace models {

struct PredictOptions {
  ArgsAction action = ArgsAction::Run;  // --help: print and exit 0
  std::string weights, model, precision = "fp32", device = "auto";
  int64_t top_k = 3, batch_size = 256;
  bool resize = false, json = false, fold_bn = false, tta = false;
  int threads = 0;
  // --precision int8 on an FP32 file: calibrate on N images of a folder (docs/quantization.md).
  int64_t calibrate = 512;
  std::string calibration_data, calibration_method = "percentile";
  bool calibration_given = false;  // any of the three flags
  std::vector<std::string> inputs;
};

extern const char* const kPredictUsage;

// argv[0] is the program; then flags and the images or folders to classify.
PredictOptions parse_predict_args(int argc, const char* const* argv);

}  // namespace models

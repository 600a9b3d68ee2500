// What each fuzzer feeds its input to: the readers of files people bring (checkpoint,
// safetensors, CIFAR-10 binary, images) and the two command-line parsers. A clean refusal
// is engine::Error (models::UsageError for a command line); anything else, a sanitizer
// report, another exception, a crash or a hang, is a finding. fuzz_main.cpp makes one
// libFuzzer binary per target; tests/test_fuzz_regressions.cpp replays the inputs that once
// broke them through the same functions.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/cifar.h"
#include "engine/checkpoint.h"
#include "engine/error.h"
#include "engine/safetensors.h"
#include "models/predict_args.h"
#include "models/trainer_args.h"

namespace fuzz {

// A broken promise the sanitizers cannot see (a parser accepting what it says it refuses).
inline void require(bool ok) {
  if (!ok) std::abort();
}

inline void checkpoint(const uint8_t* data, size_t size) {
  try {
    const engine::StateDict s = engine::parse_checkpoint(std::string(reinterpret_cast<const char*>(data), size), "fuzz.ckpt");
    for (const auto& [name, t] : s.tensors) require(t.nbytes() == t.numel() * engine::dtype_size(t.dtype()));
  } catch (const engine::Error&) {
  }
}

inline void safetensors(const uint8_t* data, size_t size) {
  try {
    const engine::SafetensorsFile f =
        engine::parse_safetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors");
    for (const auto& [name, t] : f.tensors) require(f.find(name) != nullptr);
  } catch (const engine::Error&) {
  }
}

// The binary records, then a class-balanced subset of them.
inline void cifar_binary(const uint8_t* data, size_t size) {
  try {
    const data::Dataset d = data::parse_cifar_binary_records(std::vector<uint8_t>(data, data + size), "fuzz.bin");
    require(d.images.size() == static_cast<size_t>(d.size()) * data::Dataset::kImageBytes);
    require(data::subset(d, d.size() / 2 + 1).size() == d.size() / 2 + 1);
  } catch (const engine::Error&) {
  }
}

// predict's reader (its size checked from the header before decoding) and a resize to
// 32x32; then the image-folder reader's exactly-32x32 decode.
inline void image(const uint8_t* data, size_t size) {
  try {
    const data::Image img = data::decode_image(data, size, "fuzz.png");
    require(img.width >= 1 && img.height >= 1 && img.width <= data::kMaxImageSide && img.height <= data::kMaxImageSide &&
            img.rgb.size() == static_cast<size_t>(img.width) * img.height * 3);
    require(data::resize_bilinear(img, 32, 32).size() == 32 * 32 * 3);
  } catch (const engine::Error&) {
  }
  try {
    std::vector<uint8_t> rgb(data::Dataset::kImageBytes);
    data::decode_cifar_image(data, size, "fuzz.png", rgb.data());
  } catch (const engine::Error&) {
  }
}

// The input as a command line: arguments separated by NUL bytes, after argv[0].
struct Argv {
  std::vector<std::string> args;
  std::vector<const char*> ptrs;
  Argv(const char* program, const uint8_t* data, size_t size) {
    args.emplace_back(program);
    if (size > 0) args.emplace_back();
    for (size_t i = 0; i < size; ++i) {
      if (data[i] == 0)
        args.emplace_back();
      else
        args.back() += static_cast<char>(data[i]);
    }
    for (const std::string& a : args) ptrs.push_back(a.c_str());
    ptrs.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(args.size()); }
  const char* const* argv() const { return ptrs.data(); }
};

// What the parser accepts must be within the bounds its --help promises.
inline void trainer_args(const uint8_t* data, size_t size) {
  const Argv a("trainer", data, size);
  try {
    const models::TrainerConfig c = models::parse_trainer_args(a.argc(), a.argv());
    if (c.action != models::ArgsAction::Run) return;
    require(c.epochs >= 1 && c.batch_size >= 1 && c.accumulate >= 1 && c.lr > 0 && c.momentum >= 0 &&
            c.weight_decay >= 0 && c.label_smoothing >= 0 && c.label_smoothing < 1 && c.warmup >= 0 && c.warmup < 1 &&
            c.init_scale > 0 && c.growth_interval >= 1 && c.threads >= 0 && c.threads <= models::kMaxThreads && c.log_every >= 1 && c.timeout > 0 &&
            c.checkpoint_every >= 0 && (c.checkpoint_every == 0 || !c.checkpoint.empty()));
  } catch (const models::UsageError&) {
  }
}

inline void predict_args(const uint8_t* data, size_t size) {
  const Argv a("predict", data, size);
  try {
    const models::PredictOptions o = models::parse_predict_args(a.argc(), a.argv());
    if (o.action != models::ArgsAction::Run) return;
    require(!o.weights.empty() && !o.inputs.empty() && o.top_k >= 1 && o.batch_size >= 1 && o.threads >= 0 &&
            o.threads <= models::kMaxThreads);
  } catch (const models::UsageError&) {
  }
}

}  // namespace fuzz

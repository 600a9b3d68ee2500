// Our weights under PyTorch's names and layouts, and back: what `trainer --export`,
// `trainer --init-from` and `predict --weights` move through safetensors files, so that
// `model.load_state_dict(safetensors.torch.load_file(f))` works on bench/pytorch_models.py's
// modules with no renaming.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/nn.h"
#include "engine/safetensors.h"

namespace models {

// PyTorch's state_dict of `model` (built by make_model(model_name)), in its order: per module,
// parameters then buffers. Conv weights KRSC -> [out, in, kh, kw]; Linear weights after an NHWC
// flatten get NCHW columns; batch-norm gamma/beta -> weight/bias, running statistics, and
// num_batches_tracked (I64, PyTorch's count of training forwards). Floating tensors are
// rounded once from the FP32 masters to `dtype`; CPU tensors.
std::vector<std::pair<std::string, engine::Tensor>> pytorch_state_dict(engine::Module& model,
                                                                      const std::string& model_name,
                                                                      engine::DType dtype,
                                                                      int64_t num_batches_tracked);

// Loads a PyTorch-named state (ours or PyTorch's) into the masters and batch-norm buffers
// and refreshes the compute copies. Every name must be present with its shape and a floating
// dtype (num_batches_tracked: an integer scalar), and no extra name may appear; otherwise one
// engine::Error lists the mismatches and nothing is loaded.
void load_pytorch_state_dict(engine::Module& model, const std::string& model_name,
                             const engine::SafetensorsFile& state, const std::string& source);

// The file's metadata: the format ("pt"), the model, the class names (comma-separated), the
// input convention, the steps trained.
void export_safetensors(const std::string& path, engine::Module& model, const std::string& model_name,
                        engine::DType dtype, int64_t steps, const std::vector<std::string>& class_names);
// Returns the file's metadata (empty for a file PyTorch wrote without any).
std::map<std::string, std::string> import_safetensors(const std::string& path, engine::Module& model,
                                                      const std::string& model_name);

// Class names as files carry them: "classes" in the metadata (safetensors) or meta (checkpoints),
// comma-joined. class_names_from is empty when there are none (PyTorch's own files).
std::string join_class_names(const std::vector<std::string>& names);
std::vector<std::string> class_names_from(const std::map<std::string, std::string>& metadata);

}  // namespace models

// PyTorch names and layouts for our modules' weights, and the safetensors export/import.
#include "models/pytorch_weights.h"

#include <cmath>
#include <sstream>

#include "models/models.h"

namespace models {

using engine::DType;
using engine::Module;
using engine::Shape;
using engine::Tensor;

namespace {

// One tensor of the PyTorch state_dict and where it lives in our model.
struct Entry {
  std::string name;           // PyTorch's
  Tensor ours;                // master or buffer (any device); undefined for num_batches_tracked
  Shape torch_shape;
  enum class Layout { Same, ConvKRSC, LinearFlattenHWC, Counter } layout = Layout::Same;
  std::array<int64_t, 3> hwc{};  // LinearFlattenHWC only
};

std::vector<Entry> entries(Module& model, const std::string& model_name) {
  const PytorchNaming& naming = pytorch_naming(model_name);
  std::vector<Entry> out;
  for (const auto& [path, m] : model.named_modules()) {
    const std::string prefix = path.empty() ? "" : pytorch_path(model_name, path) + ".";
    if (auto* conv = dynamic_cast<engine::Conv2d*>(m)) {
      const Shape& k = conv->weight->master.shape();  // [out, kh, kw, in]
      out.push_back({prefix + "weight", conv->weight->master, {k[0], k[3], k[1], k[2]}, Entry::Layout::ConvKRSC});
      if (conv->bias) out.push_back({prefix + "bias", conv->bias->master, conv->bias->master.shape()});
    } else if (auto* fc = dynamic_cast<engine::Linear*>(m)) {
      Entry w{prefix + "weight", fc->weight->master, fc->weight->master.shape()};
      auto flat = naming.flattened_hwc.find(path);
      if (flat != naming.flattened_hwc.end()) {
        const auto& hwc = flat->second;
        ENGINE_CHECK(hwc[0] * hwc[1] * hwc[2] == w.torch_shape[1],
                     "pytorch_naming(" << model_name << "): " << path << " flattens " << hwc[0] << "x" << hwc[1] << "x"
                                       << hwc[2] << " but has " << w.torch_shape[1] << " inputs");
        w.layout = Entry::Layout::LinearFlattenHWC;
        w.hwc = hwc;
      }
      out.push_back(w);
      if (fc->bias) out.push_back({prefix + "bias", fc->bias->master, fc->bias->master.shape()});
    } else if (auto* bn = dynamic_cast<engine::BatchNorm2d*>(m)) {
      out.push_back({prefix + "weight", bn->gamma->master, bn->gamma->master.shape()});
      out.push_back({prefix + "bias", bn->beta->master, bn->beta->master.shape()});
      out.push_back({prefix + "running_mean", bn->running_mean, bn->running_mean.shape()});
      out.push_back({prefix + "running_var", bn->running_var, bn->running_var.shape()});
      out.push_back({prefix + "num_batches_tracked", Tensor(), {}, Entry::Layout::Counter});
    }
  }
  // Every parameter must have been claimed, or the export would silently drop one.
  size_t claimed = 0;
  for (const Entry& e : out) claimed += e.ours.defined();
  ENGINE_CHECK(claimed == model.parameters().size() + 2 * (out.size() - claimed),
               "pytorch_state_dict: " << model_name << " has parameters in modules without a PyTorch layout");
  return out;
}

// Flat index in PyTorch's layout of the element at flat index i of ours.
int64_t torch_index(const Entry& e, int64_t i) {
  if (e.layout == Entry::Layout::ConvKRSC) {  // ours [o, kh, kw, c] -> theirs [o, c, kh, kw]
    const int64_t c_n = e.torch_shape[1], kh_n = e.torch_shape[2], kw_n = e.torch_shape[3];
    const int64_t c = i % c_n, kw = (i / c_n) % kw_n, kh = (i / (c_n * kw_n)) % kh_n, o = i / (c_n * kw_n * kh_n);
    return ((o * c_n + c) * kh_n + kh) * kw_n + kw;
  }
  if (e.layout == Entry::Layout::LinearFlattenHWC) {  // columns (h, w, c) -> (c, h, w)
    const auto [h_n, w_n, c_n] = e.hwc;
    const int64_t in = h_n * w_n * c_n, col = i % in, row = i / in;
    const int64_t c = col % c_n, w = (col / c_n) % w_n, h = col / (c_n * w_n);
    return row * in + (c * h_n + h) * w_n + w;
  }
  return i;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> pytorch_state_dict(Module& model, const std::string& model_name, DType dtype,
                                                              int64_t num_batches_tracked) {
  ENGINE_CHECK(engine::is_floating(dtype), "export dtype must be floating, not " << engine::dtype_name(dtype));
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Entry& e : entries(model, model_name)) {
    if (e.layout == Entry::Layout::Counter) {
      Tensor t = Tensor::empty({}, DType::I64);
      *t.data<int64_t>() = num_batches_tracked;
      out.emplace_back(e.name, t);
      continue;
    }
    const std::vector<double> ours = e.ours.to_vector();  // FP32 -> double: exact
    std::vector<double> theirs(ours.size());
    for (int64_t i = 0; i < static_cast<int64_t>(ours.size()); ++i) theirs[torch_index(e, i)] = ours[i];
    out.emplace_back(e.name, Tensor::from_vector(theirs, e.torch_shape, dtype));  // one rounding
  }
  return out;
}

void load_pytorch_state_dict(Module& model, const std::string& model_name, const engine::SafetensorsFile& state,
                             const std::string& source) {
  const std::vector<Entry> expected = entries(model, model_name);
  std::vector<std::string> problems;
  for (const Entry& e : expected) {
    const Tensor* t = state.find(e.name);
    if (!t) {
      problems.push_back("missing " + e.name);
      continue;
    }
    if (e.layout == Entry::Layout::Counter) {
      if ((t->dtype() != DType::I64 && t->dtype() != DType::I32) || t->numel() != 1)
        problems.push_back(e.name + " is " + t->desc() + ", expected an integer scalar");
      continue;
    }
    if (!engine::is_floating(t->dtype())) {
      problems.push_back(e.name + " has dtype " + engine::dtype_name(t->dtype()) + ", expected a floating dtype");
    } else if (t->shape() != e.torch_shape) {
      problems.push_back(e.name + " has shape " + engine::shape_str(t->shape()) + ", " + model_name + " expects " +
                         engine::shape_str(e.torch_shape));
    } else {
      // Values must survive the trip into FP32 and make sense (a variance is never negative).
      const std::string var_suffix = "running_var";
      const bool variance = e.name.size() >= var_suffix.size() &&
                            e.name.compare(e.name.size() - var_suffix.size(), var_suffix.size(), var_suffix) == 0;
      for (double v : t->to_vector())
        if (!std::isfinite(v) || std::fabs(v) > engine::dtype_max_finite(DType::F32) || (variance && v < 0)) {
          problems.push_back(e.name + (variance && v < 0 ? " holds a negative variance" : " holds non-finite or out-of-FP32-range values"));
          break;
        }
    }
  }
  for (const auto& [name, t] : state.tensors) {
    bool known = false;
    for (const Entry& e : expected) known = known || e.name == name;
    if (!known) problems.push_back("unexpected " + name);
  }
  if (!problems.empty()) {
    std::ostringstream msg;
    msg << source << " does not hold " << model_name << "'s weights: ";
    for (size_t i = 0; i < problems.size() && i < 6; ++i) msg << (i ? "; " : "") << problems[i];
    if (problems.size() > 6) msg << "; and " << problems.size() - 6 << " more";
    ENGINE_FAIL(msg.str());
  }
  // Everything checked: now copy (nothing was touched before this point).
  for (const Entry& e : expected) {
    if (e.layout == Entry::Layout::Counter) continue;
    const std::vector<double> theirs = state.find(e.name)->to_vector();
    std::vector<double> ours(theirs.size());
    for (int64_t i = 0; i < static_cast<int64_t>(ours.size()); ++i) ours[i] = theirs[torch_index(e, i)];
    Tensor dst = e.ours;
    dst.copy_from(Tensor::from_vector(ours, dst.shape(), dst.dtype()));
  }
  model.refresh_compute_copies();
}

void export_safetensors(const std::string& path, Module& model, const std::string& model_name, DType dtype,
                        int64_t steps, const std::vector<std::string>& class_names) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"},  // what Hugging Face tools look for
      {"model", model_name},
      {"classes", join_class_names(class_names)},
      {"input", "float NCHW RGB 32x32, (pixel / 255 - 0.5) / 0.5"},
      {"steps", std::to_string(steps)},
      {"producer", "mpcnn trainer"}};
  engine::save_safetensors(path, pytorch_state_dict(model, model_name, dtype, steps), metadata);
}

std::map<std::string, std::string> import_safetensors(const std::string& path, Module& model,
                                                      const std::string& model_name) {
  const engine::SafetensorsFile file = engine::load_safetensors(path);
  auto it = file.metadata.find("model");
  ENGINE_CHECK(it == file.metadata.end() || it->second == model_name,
               path << " holds a " << it->second << ", not a " << model_name << " (use --model " << it->second << ")");
  load_pytorch_state_dict(model, model_name, file, path);
  return file.metadata;
}

std::string join_class_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& c : names) out += (out.empty() ? "" : ",") + c;
  return out;
}

std::vector<std::string> class_names_from(const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> names;
  auto it = metadata.find("classes");
  if (it == metadata.end() || it->second.empty()) return names;
  std::stringstream ss(it->second);
  for (std::string c; std::getline(ss, c, ',');) names.push_back(c);
  return names;
}

}  // namespace models

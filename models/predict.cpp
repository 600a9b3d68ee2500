// predict: classifies images with trained weights (an exported safetensors file, a PyTorch
// state_dict of the matching model, or a trainer checkpoint) in FP32, FP16 or BF16 inference,
// or INT8 (an INT8 file, or FP32 weights quantized here), printing the top-k classes per image. `predict --help` lists the options.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "data/cifar.h"
#include "engine/amp.h"
#include "engine/checkpoint.h"
#include "engine/device.h"
#include "models/cli.h"
#include "models/int8_net.h"
#include "models/models.h"
#include "models/predict_args.h"
#include "models/pytorch_weights.h"
#include "models/tta.h"

namespace {

namespace fs = std::filesystem;
using engine::DType;
using engine::Tensor;

using Options = models::PredictOptions;

[[noreturn]] void usage_error(const std::string& msg) { throw models::UsageError(msg); }

// Files as given; folders expanded recursively to their images, sorted by path.
std::vector<std::string> collect_images(const std::vector<std::string>& inputs) {
  std::vector<std::string> out;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(in, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec))
        if (it->is_regular_file(ec) && data::is_image_name(it->path().string())) found.push_back(it->path().string());
      ENGINE_CHECK(!ec, "cannot list folder '" << in << "': " << ec.message());
      ENGINE_CHECK(!found.empty(), "folder '" << in << "' holds no .png, .jpg or .jpeg images");
      std::sort(found.begin(), found.end());
      out.insert(out.end(), found.begin(), found.end());
    } else {
      ENGINE_CHECK(fs::exists(in, ec), "no such image or folder: '" << in << "'");
      out.push_back(in);
    }
  }
  return out;
}

struct Loaded {
  std::shared_ptr<engine::Module> model;
  std::shared_ptr<models::Int8Net> int8;  // INT8 inference: runs instead of `model`
  std::string model_name;
  std::vector<std::string> classes;
  int folded = 0;
};

bool is_checkpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  f.read(magic, sizeof magic);
  return f.gcount() == 8 && std::memcmp(magic, "MPCNNCKP", 8) == 0;
}

// The calibration images in the order the trainer reads a training folder: a folder with one
// subfolder per class is read class by class (the model's class order, files by name, as
// data/cifar.cpp does), so every count/N-th image is the trainer's pick; any other folder
// gives all the images below it in path order.
std::vector<std::string> calibration_files(const std::string& dir, const std::vector<std::string>& classes) {
  std::error_code ec;
  bool class_folders = !classes.empty();
  for (const std::string& c : classes) class_folders = class_folders && fs::is_directory(fs::path(dir) / c, ec);
  if (!class_folders) return collect_images({dir});
  std::vector<std::string> out;
  for (const std::string& c : classes) {
    std::vector<std::string> files;
    for (auto it = fs::directory_iterator(fs::path(dir) / c, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      if (it->is_regular_file(ec) && data::is_image_name(it->path().string())) files.push_back(it->path().string());
    ENGINE_CHECK(!ec, "cannot list folder '" << (fs::path(dir) / c).string() << "': " << ec.message());
    std::sort(files.begin(), files.end(), [](const std::string& a, const std::string& b) {
      return fs::path(a).filename().string() < fs::path(b).filename().string();
    });
    out.insert(out.end(), files.begin(), files.end());
  }
  ENGINE_CHECK(!out.empty(), "calibration folder '" << dir << "' holds no .png, .jpg or .jpeg images");
  return out;
}

// The safetensors header names format mpcnn-int8 (read without loading the tensors).
bool is_int8_file(const std::string& path) {
  if (is_checkpoint(path)) return false;
  std::ifstream f(path, std::ios::binary);
  unsigned char len[8] = {};
  if (!f.read(reinterpret_cast<char*>(len), 8)) return false;  // load() says what is wrong
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
  if (n > (100u << 20)) return false;
  std::string header(static_cast<size_t>(n), '\0');
  if (!f.read(header.data(), static_cast<std::streamsize>(n))) return false;
  return header.find("\"format\":\"mpcnn-int8\"") != std::string::npos;
}

// Builds the model in the inference dtype on the device, then loads the weights.
Loaded load(const Options& o, DType dtype, engine::Device device) {
  Loaded l;
  std::map<std::string, std::string> meta;
  engine::StateDict ck;
  engine::SafetensorsFile st;
  const bool checkpoint = is_checkpoint(o.weights);
  if (checkpoint) {
    ck = engine::load_checkpoint(o.weights);
    meta = ck.meta;
  } else {
    st = engine::load_safetensors(o.weights);
    meta = st.metadata;
  }
  const std::string file_model = meta.count("model") ? meta.at("model") : "";
  ENGINE_CHECK(o.model.empty() || file_model.empty() || o.model == file_model,
               o.weights << " holds a " << file_model << ", not a " << o.model);
  l.model_name = !o.model.empty() ? o.model : !file_model.empty() ? file_model : "simplecnn";
  l.classes = models::class_names_from(meta);
  if (l.classes.empty()) l.classes = data::cifar10_class_names();
  l.model = models::make_model(l.model_name, static_cast<int>(l.classes.size()));
  const bool int8_file = meta.count("format") && meta.at("format") == "mpcnn-int8";
  if (int8_file || o.precision == "int8") {
    ENGINE_CHECK(!device.is_cuda(), "INT8 inference runs on the CPU only (--device cpu); the GPU's is not written yet");
    if (int8_file && o.precision != "fp32" && o.precision != "int8")
      usage_error(o.weights + " is an INT8 model: it runs with --precision int8 (or without --precision)");
    if (int8_file && o.calibration_given)
      usage_error(o.weights + " is already calibrated: --calibration-data, --calibrate and --calibration-method are "
                  "for FP32 weights");
    if (!int8_file && o.calibration_data.empty())
      usage_error("--precision int8 on FP32 weights needs --calibration-data DIR (images to calibrate on), or an INT8 "
                  "file from trainer --export-dtype int8");
    l.model->eval();
    if (int8_file) {
      engine::fold_batch_norm(*l.model, DType::F32);
      l.int8 = std::make_shared<models::Int8Net>(models::Int8Net::from_model(*l.model, l.model_name));
      l.int8->load(o.weights);
      l.int8->release_fp32_weights();
      l.model.reset();  // the INT8 steps hold all they need
      return l;
    }
    if (checkpoint)
      l.model->load_state(ck);
    else
      models::load_pytorch_state_dict(*l.model, l.model_name, st, o.weights);
    const std::vector<std::string> found = calibration_files(o.calibration_data, l.classes);
    const int64_t n = std::min<int64_t>(o.calibrate, static_cast<int64_t>(found.size()));
    const int64_t stride = static_cast<int64_t>(found.size()) / n;
    std::vector<uint8_t> images(static_cast<size_t>(n * data::Dataset::kImageBytes));
    for (int64_t i = 0; i < n; ++i) {
      const std::string& path = found[static_cast<size_t>(i * stride)];
      const data::Image img = data::read_image(path);
      std::vector<uint8_t> rgb = img.rgb;
      if (img.width != 32 || img.height != 32) {
        ENGINE_CHECK(o.resize, "calibration image '" << path << "' is " << img.width << "x" << img.height
                                                     << "; the models take 32x32 (--resize scales it, bilinear)");
        rgb = data::resize_bilinear(img, 32, 32);
      }
      std::memcpy(images.data() + i * data::Dataset::kImageBytes, rgb.data(), data::Dataset::kImageBytes);
    }
    l.int8 = std::make_shared<models::Int8Net>(
        models::quantize_model(*l.model, l.model_name, models::calibration_batches(images.data(), n, n),
                               engine::parse_calibration_method(o.calibration_method)));
    l.int8->release_fp32_weights();
    l.model.reset();
    return l;
  }
  l.model->set_compute_dtype(dtype);
  l.model->to(device);
  if (checkpoint)
    l.model->load_state(ck);
  else
    models::load_pytorch_state_dict(*l.model, l.model_name, st, o.weights);
  l.model->eval();
  if (o.fold_bn) l.folded = engine::fold_batch_norm(*l.model, dtype);
  l.model->drop_masters_for_inference();  // FP16/BF16: half the weight bytes
  return l;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += static_cast<char>(c);
  }
  return out + "\"";
}

int run(const Options& o) {
#ifdef _OPENMP
  if (o.threads > 0) omp_set_num_threads(o.threads);
#endif
  // INT8 runs on the CPU: "auto" means the CPU there.
  const bool int8 = o.precision == "int8" || is_int8_file(o.weights);
  if (int8 && o.device.rfind("cuda", 0) == 0)
    usage_error("INT8 inference runs on the CPU only (--device cpu); the GPU's is not written yet");
  const engine::Device device = engine::parse_device(o.device == "auto" && int8 ? std::string("cpu") : o.device);
  DType dtype = o.precision == "fp32" || o.precision == "int8" ? DType::F32 : o.precision == "fp16" ? DType::F16 : DType::BF16;
  const std::vector<std::string> files = collect_images(o.inputs);
  Loaded l = load(o, dtype, device);
  const std::string precision = l.int8 ? "int8" : o.precision;
  const int64_t k = static_cast<int64_t>(l.classes.size()), top = o.top_k;
  if (top > k)
    usage_error("--top-k " + std::to_string(top) + " is more than the model's " + std::to_string(k) + " classes");
  if (!o.json)
    std::printf("%s from %s, %s inference on %s, %zu images%s\n", l.model_name.c_str(), o.weights.c_str(),
                precision.c_str(), device.str().c_str(), files.size(),
                l.int8 ? (" (" + models::int8_summary(*l.int8) + ")").c_str()
                : o.fold_bn ? (", " + std::to_string(l.folded) + " batch-norms folded").c_str() : "");

  engine::NoGradScope no_grad;
  engine::AutocastScope autocast(dtype);
  const kernels::AugmentConfig norm = models::input_normalisation(l.model_name);  // the trainer's, no augmentation
  const std::vector<models::TtaView> tta_views = models::tta_views(norm);
  if (o.tta && l.int8) throw models::UsageError("--tta is for fp32, fp16 and bf16 inference; " + o.weights + " is an INT8 file");
  int64_t labelled = 0, correct = 0;
  const int64_t n = static_cast<int64_t>(files.size());
  for (int64_t begin = 0; begin < n; begin += o.batch_size) {
    const int64_t b = std::min(o.batch_size, n - begin);
    Tensor images = Tensor::empty({b, 32, 32, 3}, DType::U8);
    for (int64_t i = 0; i < b; ++i) {
      const std::string& path = files[begin + i];
      const data::Image img = data::read_image(path);
      uint8_t* dst = images.data<uint8_t>() + i * data::Dataset::kImageBytes;
      if (img.width == 32 && img.height == 32) {
        std::memcpy(dst, img.rgb.data(), data::Dataset::kImageBytes);
      } else {
        ENGINE_CHECK(o.resize, "image '" << path << "' is " << img.width << "x" << img.height
                                         << "; the models take 32x32 (--resize scales it, bilinear)");
        const std::vector<uint8_t> small = data::resize_bilinear(img, 32, 32);
        std::memcpy(dst, small.data(), small.size());
      }
    }
    std::vector<int32_t> idx(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) idx[i] = static_cast<int32_t>(i);
    Tensor indices = Tensor::from_ints(idx, {b}), labels = Tensor::from_ints(std::vector<int32_t>(b, 0), {b});
    if (device.is_cuda()) {
      images = images.to(device);
      indices = indices.to(device);
      labels = labels.to(device);
    }
    Tensor x = Tensor::empty({b, 32, 32, 3}, dtype, device), y = Tensor::empty({b}, DType::I32, device);
    std::vector<double> z;
    if (o.tta) {
      z = models::tta_logits(*l.model, tta_views, images, labels, indices, x, y).to_vector();
    } else {
      engine::make_batch(images, labels, indices, false, norm, 0, 0, x, y);
      z = (l.int8 ? l.int8->forward_int8(x) : (*l.model)(x)).to_vector();
    }
    for (int64_t i = 0; i < b; ++i) {
      const double* zi = z.data() + i * k;
      // Softmax in double on the host, shifted by the maximum.
      const std::string& path = files[begin + i];
      for (int64_t j = 0; j < k; ++j)
        ENGINE_CHECK(std::isfinite(zi[j]), "the logits of '" << path << "' are not finite in " << precision
                                                             << (dtype == DType::F32 ? "" : " (an overflow? try --precision fp32)"));
      const double zmax = *std::max_element(zi, zi + k);
      std::vector<double> p(static_cast<size_t>(k));
      double total = 0;
      for (int64_t j = 0; j < k; ++j) total += p[j] = std::exp(zi[j] - zmax);
      std::vector<int64_t> order(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) order[j] = j;
      // Ties keep the lower class first, as the trainer's accuracy count does.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return zi[a] > zi[c]; });
      const std::string folder = fs::path(path).parent_path().filename().string();
      const auto label = std::find(l.classes.begin(), l.classes.end(), folder);
      if (label != l.classes.end()) {
        ++labelled;
        correct += order[0] == label - l.classes.begin();
      }
      if (o.json) {
        std::string line = "{\"image\":" + json_string(path) + ",\"top\":[";
        char buf[64];
        for (int64_t t = 0; t < top; ++t) {
          std::snprintf(buf, sizeof buf, "%.9g", p[order[t]] / total);
          line += std::string(t ? "," : "") + "{\"class\":" + json_string(l.classes[order[t]]) + ",\"p\":" + buf + "}";
        }
        line += "],\"logits\":[";
        for (int64_t j = 0; j < k; ++j) {
          std::snprintf(buf, sizeof buf, "%.9g", zi[j]);
          line += std::string(j ? "," : "") + buf;
        }
        std::printf("%s]}\n", line.c_str());
      } else {
        std::printf("%s:", path.c_str());
        for (int64_t t = 0; t < top; ++t)
          std::printf("%s %s %.1f%%", t ? "," : "", l.classes[order[t]].c_str(), 100.0 * p[order[t]] / total);
        std::printf("\n");
      }
    }
  }
  if (labelled > 0 && !o.json)
    std::printf("accuracy %.2f%% (%lld of %lld images in a folder named after their class)\n",
                100.0 * static_cast<double>(correct) / static_cast<double>(labelled), static_cast<long long>(correct),
                static_cast<long long>(labelled));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  try {
    o = models::parse_predict_args(argc, argv);
  } catch (const models::UsageError& e) {
    return models::report_usage_error("predict", e);
  }
  if (o.action == models::ArgsAction::Help) {
    std::fputs(models::kPredictUsage, stdout);
    return 0;
  }
  if (const int rc = models::report_environment_error()) return rc;
  return models::run_reporting_errors([&] {
    try {
      return run(o);
    } catch (const models::UsageError& e) {  // --top-k above the file's classes
      return models::report_usage_error("predict", e);
    }
  });
}

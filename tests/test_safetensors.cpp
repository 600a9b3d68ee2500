// safetensors: hand-written files read right, malformed ones refused; the models' export in
// PyTorch's names and layouts, checked element by element; export/import round trips; the
// FNV-1a hash that checkpoints and replicas share.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "engine/checkpoint.h"
#include "engine/random.h"
#include "engine/safetensors.h"
#include "models/models.h"
#include "models/pytorch_weights.h"

using Catch::Contains;
using engine::DType;
using engine::Tensor;
namespace fs = std::filesystem;

namespace {

struct TempFile {
  std::string path;
  TempFile() {
    std::random_device rd;
    path = (fs::temp_directory_path() / ("engine_safetensors_" + std::to_string(rd()) + std::to_string(rd()))).string();
  }
  ~TempFile() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

// A file as the format lays it out: u64 LE header length, header, data.
std::string file_bytes(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string f32_bytes(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(&s[0], std::data(v), s.size());
  return s;
}

}  // namespace

TEST_CASE("safetensors: a hand-written file is read as the format defines it", "[safetensors]") {
  TempFile f;
  // Two tensors listed out of data order, metadata with an escape, a U8 scalar.
  const std::string header =
      R"({"b":{"dtype":"F32","shape":[3],"data_offsets":[8,20]},"__metadata__":{"k":"a\"b\u00e9"},)"
      R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"s":{"dtype":"U8","shape":[],"data_offsets":[20,21]}})";
  write(f.path, file_bytes(header, f32_bytes({1.5f, -2.f}) + f32_bytes({3.f, 4.f, 5.25f}) + "\x07"));
  const engine::SafetensorsFile st = engine::load_safetensors(f.path);
  REQUIRE(st.tensors.size() == 3);
  REQUIRE(st.tensors[0].first == "a");  // in the order of their data
  REQUIRE(st.find("a")->to_vector() == std::vector<double>{1.5, -2.0});
  REQUIRE(st.find("b")->to_vector() == std::vector<double>{3.0, 4.0, 5.25});
  REQUIRE(st.find("s")->shape().empty());
  REQUIRE(st.find("s")->to_vector() == std::vector<double>{7.0});
  REQUIRE(st.metadata.at("k") == "a\"b\xc3\xa9");  // \u00e9 is UTF-8 C3 A9
  REQUIRE(st.find("zzz") == nullptr);
}

TEST_CASE("safetensors: the writer's bytes follow the format, and read back bit for bit", "[safetensors]") {
  TempFile f;
  Tensor a = Tensor::from_vector({1.0, -0.1, 65504.0}, {3}, DType::F16);
  Tensor b = Tensor::from_vector({0.1, 1e-30, -3.0, 7.0}, {2, 2}, DType::F32);
  Tensor c = Tensor::from_vector({}, {0, 4}, DType::BF16);
  engine::save_safetensors(f.path, {{"w.a", a}, {"b", b}, {"empty", c}}, {{"format", "pt"}});
  std::ifstream in(f.path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian host
  const std::string expected_header =
      R"({"__metadata__":{"format":"pt"},"w.a":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},)"
      R"("b":{"dtype":"F32","shape":[2,2],"data_offsets":[6,22]},"empty":{"dtype":"BF16","shape":[0,4],"data_offsets":[22,22]}})";
  REQUIRE(n % 8 == 0);  // the data starts 8-byte aligned
  REQUIRE(bytes.substr(8, expected_header.size()) == expected_header);
  REQUIRE(bytes.substr(8 + expected_header.size(), n - expected_header.size()) == std::string(n - expected_header.size(), ' '));
  REQUIRE(bytes.size() == 8 + n + 22);
  REQUIRE(std::memcmp(bytes.data() + 8 + n, a.raw(), 6) == 0);
  REQUIRE(std::memcmp(bytes.data() + 8 + n + 6, b.raw(), 16) == 0);

  const engine::SafetensorsFile st = engine::load_safetensors(f.path);
  REQUIRE(st.find("w.a")->dtype() == DType::F16);
  REQUIRE(std::memcmp(st.find("w.a")->raw(), a.raw(), 6) == 0);
  REQUIRE(std::memcmp(st.find("b")->raw(), b.raw(), 16) == 0);
  REQUIRE(st.find("empty")->shape() == engine::Shape{0, 4});
}

TEST_CASE("safetensors: malformed files are refused with one clear error", "[safetensors]") {
  TempFile f;
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8 = f32_bytes({1.f, 2.f});
  struct Case {
    const char* what;
    std::string bytes;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"shorter than the length", std::string("\x05\x00\x00", 3), "shorter than the 8-byte header length"},
      {"header length beyond the file", file_bytes("{" + ok_entry + "}", data8).substr(0, 20), "runs past the end of the file"},
      {"huge header length", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f{}", 10), "above the format's limit of 100,000,000 bytes"},
      {"not an object", file_bytes("[1]", ""), "does not start with '{'"},
      {"truncated JSON", file_bytes("{\"a\":{\"dtype\":\"F32\"", ""), "header ends early"},
      {"trailing text", file_bytes("{" + ok_entry + "}x", data8), "unexpected text after the JSON object"},
      {"offsets outside the data", file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abc"),
       "outside the 3 data bytes"},
      {"offsets disagree with the shape", file_bytes(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
       "has 8 bytes for shape [3] of F32 (12 expected)"},
      {"overlapping tensors",
       file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                  data8),
       "overlaps the tensor before it"},
      {"a hole in the data",
       file_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", data8), "bytes 0 to 4 of the data belong to no tensor"},
      {"trailing data", file_bytes("{" + ok_entry + "}", data8 + "zz"), "bytes 8 to 10 of the data belong to no tensor"},
      {"unknown dtype", file_bytes(R"({"a":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", data8),
       "dtype 'F8_E4M3', which this engine does not read"},
      {"a repeated name", file_bytes("{" + ok_entry + "," + ok_entry + "}", data8), "repeats the name 'a'"},
      {"a missing field", file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", data8), "lacks dtype, shape or data_offsets"},
      {"a negative size", file_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8), "negative number"},
      {"a float offset", file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", data8), "non-integer number"},
      {"a huge shape", file_bytes(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", data8),
       "larger than the file's data"},
      {"a leading zero", file_bytes(R"({"a":{"dtype":"F32","shape":[02],"data_offsets":[0,8]}})", data8), "leading zero"},
      {"a lone surrogate", file_bytes(R"({"\udc00":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data8), "lone surrogate"},
      {"metadata not strings", file_bytes(R"({"__metadata__":{"k":1}})", ""), "__metadata__ entry 'k' is not a string"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    write(f.path, c.bytes);
    REQUIRE_THROWS_WITH(engine::load_safetensors(f.path), Contains(f.path) && Contains(c.message));
  }
  REQUIRE_THROWS_WITH(engine::load_safetensors(f.path + ".absent"), Contains("cannot open"));
}

TEST_CASE("safetensors export: PyTorch's names, and conv / flattened-linear layouts element by element", "[safetensors]") {
  engine::manual_seed(3);
  auto net = models::simplecnn();
  const auto state = models::pytorch_state_dict(*net, "simplecnn", DType::F32, 0);
  std::vector<std::string> names;
  for (const auto& [n, t] : state) names.push_back(n);
  REQUIRE(names == std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                            "fc1.bias", "fc2.weight", "fc2.bias"});
  const auto params = net->named_parameters();
  auto ours = [&](const std::string& name) {
    for (const auto& [n, p] : params)
      if (n == name) return p->master.to_vector();
    FAIL("no parameter " << name);
    return std::vector<double>{};
  };
  // conv2: ours [32, 3, 3, 16] (KRSC), PyTorch [32, 16, 3, 3] (OIHW).
  const Tensor& conv2 = state[2].second;
  REQUIRE(conv2.shape() == engine::Shape{32, 16, 3, 3});
  const std::vector<double> w2 = ours("3.weight"), t2 = conv2.to_vector();
  for (int o = 0; o < 32; ++o)
    for (int kh = 0; kh < 3; ++kh)
      for (int kw = 0; kw < 3; ++kw)
        for (int c = 0; c < 16; ++c) REQUIRE(t2[((o * 16 + c) * 3 + kh) * 3 + kw] == w2[((o * 3 + kh) * 3 + kw) * 16 + c]);
  // fc1 reads our NHWC flatten (h, w, c); PyTorch's view(-1, 32*8*8) of NCHW is (c, h, w).
  const std::vector<double> w3 = ours("7.weight"), t3 = state[4].second.to_vector();
  for (int o = 0; o < 256; o += 17)
    for (int h = 0; h < 8; ++h)
      for (int w = 0; w < 8; ++w)
        for (int c = 0; c < 32; ++c) REQUIRE(t3[o * 2048 + c * 64 + h * 8 + w] == w3[o * 2048 + (h * 8 + w) * 32 + c]);
  REQUIRE(state[7].second.to_vector() == ours("10.bias"));

  // Batch-norm: weight, bias, running_mean, running_var, num_batches_tracked, as PyTorch.
  auto r9 = models::resnet9();
  const auto s9 = models::pytorch_state_dict(*r9, "resnet9", DType::F32, 42);
  REQUIRE(s9[0].first == "0.0.weight");
  REQUIRE(s9[0].second.shape() == engine::Shape{64, 3, 3, 3});
  REQUIRE(s9[1].first == "0.1.weight");
  REQUIRE(s9[3].first == "0.1.running_mean");
  REQUIRE(s9[4].first == "0.1.running_var");
  REQUIRE(s9[5].first == "0.1.num_batches_tracked");
  REQUIRE(s9[5].second.dtype() == DType::I64);
  REQUIRE(s9[5].second.shape().empty());
  REQUIRE(s9[5].second.item() == 42);
  REQUIRE(s9.back().first == "5.bias");
}

namespace {

// Distinct, non-trivial batch-norm statistics so the round trip checks them too.
void scramble_buffers(engine::Module& m, double base) {
  int i = 0;
  for (const auto& [path, mod] : m.named_modules())
    if (auto* bn = dynamic_cast<engine::BatchNorm2d*>(mod)) {
      std::vector<double> mean(bn->running_mean.numel()), var(mean.size());
      for (size_t j = 0; j < mean.size(); ++j) {
        mean[j] = base + 0.001 * (j + ++i);
        var[j] = 1.0 + 0.37 * static_cast<double>(j % 7) + base;
      }
      bn->running_mean.copy_from(Tensor::from_vector(mean, bn->running_mean.shape(), DType::F32));
      bn->running_var.copy_from(Tensor::from_vector(var, bn->running_var.shape(), DType::F32));
    }
}

std::vector<std::vector<double>> everything(engine::Module& m) {
  std::vector<std::vector<double>> out;
  for (const auto& p : m.parameters()) out.push_back(p->master.to_vector());
  for (const auto& [path, mod] : m.named_modules())
    if (auto* bn = dynamic_cast<engine::BatchNorm2d*>(mod)) {
      out.push_back(bn->running_mean.to_vector());
      out.push_back(bn->running_var.to_vector());
    }
  return out;
}

}  // namespace

TEST_CASE("safetensors export then import: bit for bit in FP32, one rounding in FP16", "[safetensors]") {
  for (const std::string name : {"simplecnn", "resnet9", "resnet18", "resnet50", "efficientnet_b0"}) {
    INFO(name);
    TempFile f32, f16;
    engine::manual_seed(11);
    auto a = models::make_model(name);
    scramble_buffers(*a, 0.25);
    models::export_safetensors(f32.path, *a, name, DType::F32, 7, {"x", "y", "z", "0", "1", "2", "3", "4", "5", "6"});
    models::export_safetensors(f16.path, *a, name, DType::F16, 7, {});
    engine::manual_seed(12);  // different initial weights
    auto b = models::make_model(name);
    REQUIRE(everything(*a) != everything(*b));
    const auto meta = models::import_safetensors(f32.path, *b, name);
    REQUIRE(everything(*a) == everything(*b));  // exact: FP32 -> file -> FP32 moves bits
    REQUIRE(meta.at("steps") == "7");
    REQUIRE(models::class_names_from(meta).size() == 10);

    engine::manual_seed(13);
    auto c = models::make_model(name);
    models::import_safetensors(f16.path, *c, name);
    const auto va = everything(*a), vc = everything(*c);
    int64_t outside = 0, changed = 0;
    for (size_t t = 0; t < va.size(); ++t)
      for (size_t i = 0; i < va[t].size(); ++i) {
        // Round to nearest FP16: half an ulp, 2^-11 relative for normals, 2^-25 absolute below 2^-14.
        const double bound = std::max(std::ldexp(std::fabs(va[t][i]), -11), std::ldexp(1.0, -25));
        outside += std::fabs(vc[t][i] - va[t][i]) > bound;
        changed += vc[t][i] != va[t][i];
      }
    REQUIRE(outside == 0);
    REQUIRE(changed > 0);  // it did go through FP16
  }
}

TEST_CASE("safetensors import: mismatches are listed and nothing is loaded", "[safetensors]") {
  TempFile f;
  engine::manual_seed(5);
  auto net = models::simplecnn();
  auto state = models::pytorch_state_dict(*net, "simplecnn", DType::F32, 0);
  state.erase(state.begin() + 1);                                           // conv1.bias missing
  state[3].second = Tensor::zeros({256, 1024}, DType::F32);                 // fc1.weight wrong shape
  state[5].second = Tensor::zeros({10, 256}, DType::I32);                   // fc2.weight integer
  state.emplace_back("fc3.weight", Tensor::zeros({1}, DType::F32));         // a name we do not have
  state[1].second = Tensor::full({32, 16, 3, 3}, NAN, DType::F32);           // conv2.weight NaN
  engine::save_safetensors(f.path, state);  // no metadata, as PyTorch's own files
  engine::manual_seed(6);
  auto target = models::simplecnn();
  const auto before = everything(*target);
  REQUIRE_THROWS_WITH(models::import_safetensors(f.path, *target, "simplecnn"),
                      Contains("does not hold simplecnn's weights") && Contains("missing conv1.bias") &&
                          Contains("fc1.weight has shape [256,1024], simplecnn expects [256,2048]") &&
                          Contains("fc2.weight has dtype i32, expected a floating dtype") &&
                          Contains("unexpected fc3.weight") &&
                          Contains("conv2.weight holds non-finite or out-of-FP32-range values"));
  REQUIRE(everything(*target) == before);

  // Another model's file, by its metadata.
  TempFile g;
  auto r9 = models::resnet9();
  models::export_safetensors(g.path, *r9, "resnet9", DType::F32, 0, {});
  REQUIRE_THROWS_WITH(models::import_safetensors(g.path, *target, "simplecnn"), Contains("holds a resnet9, not a simplecnn"));
  REQUIRE(everything(*target) == before);

  // A negative running variance, in a file otherwise right.
  auto r9b = models::resnet9();
  auto s9 = models::pytorch_state_dict(*r9, "resnet9", DType::F32, 0);
  for (auto& [n, t] : s9)
    if (n == "0.1.running_var") t = Tensor::full({64}, -1.0, DType::F32);
  engine::save_safetensors(g.path, s9);
  REQUIRE_THROWS_WITH(models::import_safetensors(g.path, *r9b, "resnet9"), Contains("0.1.running_var holds a negative variance"));
}

TEST_CASE("fnv1a gives FNV-1a's published 64-bit values, carried over pieces alike", "[checkpoint]") {
  // The reference values of the FNV authors' test suite (isthe.com/chongo/tech/comp/fnv).
  const auto hash = [](const std::string& s) { return engine::fnv1a(engine::kFnv1aBasis, s.data(), s.size()); };
  CHECK(hash("") == 0xcbf29ce484222325ull);
  CHECK(hash("a") == 0xaf63dc4c8601ec8cull);
  CHECK(hash("foobar") == 0x85944171f73967e8ull);
  CHECK(engine::fnv1a(hash("foo"), "bar", 3) == hash("foobar"));
}

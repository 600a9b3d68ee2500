// The fuzzers' inputs through the same functions the fuzzers call (tests/fuzz/targets.h), in
// every build: each seed of the corpus is a valid file its reader accepts (so the fuzzers
// start inside the format), and every input that once broke a reader or a parser
// (tests/fuzz/regressions/<target>/) is now handled: refused with one error, or read.
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tests/fuzz/targets.h"

namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::vector<fs::path> files_in(const std::string& dir) {
  std::vector<fs::path> out;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

const std::string kFuzzDir = ENGINE_FUZZ_DIR;

}  // namespace

TEST_CASE("every seed of the fuzz corpus is a valid input its reader accepts", "[fuzz]") {
  const std::map<std::string, std::function<void(const std::vector<uint8_t>&, const std::string&)>> accept = {
      {"checkpoint", [](const auto& b, const auto& n) { engine::parse_checkpoint(std::string(b.begin(), b.end()), n); }},
      {"safetensors", [](const auto& b, const auto& n) { engine::parse_safetensors(std::string(b.begin(), b.end()), n); }},
      {"cifar_binary", [](const auto& b, const auto& n) { data::parse_cifar_binary_records(b, n); }},
      {"image", [](const auto& b, const auto& n) { data::decode_image(b.data(), b.size(), n); }},
      {"trainer_args",
       [](const auto& b, const auto&) {
         const fuzz::Argv a("trainer", b.data(), b.size());
         models::parse_trainer_args(a.argc(), a.argv());
       }},
      {"predict_args", [](const auto& b, const auto&) {
         const fuzz::Argv a("predict", b.data(), b.size());
         models::parse_predict_args(a.argc(), a.argv());
       }}};
  for (const auto& [target, read] : accept) {
    const auto seeds = files_in(kFuzzDir + "/corpus/" + target);
    INFO(target);
    CHECK(!seeds.empty());
    for (const fs::path& p : seeds) {
      INFO(p.string());
      CHECK_NOTHROW(read(read_bytes(p), p.string()));
    }
  }
}

TEST_CASE("inputs that once broke a reader or a parser are handled now, and each is documented", "[fuzz]") {
  const std::map<std::string, void (*)(const uint8_t*, size_t)> targets = {
      {"checkpoint", fuzz::checkpoint},     {"safetensors", fuzz::safetensors},   {"cifar_binary", fuzz::cifar_binary},
      {"image", fuzz::image},               {"trainer_args", fuzz::trainer_args}, {"predict_args", fuzz::predict_args}};
  std::ifstream readme_file(kFuzzDir + "/regressions/README.md");
  const std::string readme((std::istreambuf_iterator<char>(readme_file)), {});
  size_t replayed = 0;
  for (const auto& [target, run] : targets) {
    for (const fs::path& p : files_in(kFuzzDir + "/regressions/" + target)) {
      INFO(p.string());
      const std::vector<uint8_t> bytes = read_bytes(p);
      run(bytes.data(), bytes.size());  // a crash, an abort or a sanitizer report ends the run here
      CHECK(readme.find("`" + target + "/" + p.filename().string() + "`") != std::string::npos);
      ++replayed;
    }
  }
  // And the other way: every file the README lists is there (none was lost or renamed).
  size_t listed = 0;
  std::istringstream lines(readme);
  for (std::string line; std::getline(lines, line);) listed += line.rfind("| `", 0) == 0;  // a table row
  CHECK(replayed == listed);
}

TEST_CASE("the image inputs that broke stb_image are refused at our boundary, each with its reason", "[fuzz][data]") {
  const std::map<std::string, std::string> refused = {
      {"jpeg-dht-over-256-codes", "a JPEG Huffman table declares more than 256 codes"},
      {"jpeg-fill-bytes-before-soi-dht-over-256-codes", "a JPEG Huffman table declares more than 256 codes"},
      {"png-idat-declares-2gb", "a PNG chunk runs past the end of the file"},
      {"jpeg-huffman-symbol-index-negative", "a JPEG scan uses a Huffman table no DHT segment defined"}};
  for (const auto& [file, reason] : refused) {
    INFO(file);
    const std::vector<uint8_t> bytes = read_bytes(kFuzzDir + "/regressions/image/" + file);
    REQUIRE(!bytes.empty());
    CHECK_THROWS_WITH(data::decode_image(bytes.data(), bytes.size(), file), Catch::Matchers::Contains(reason));
    std::vector<uint8_t> rgb(data::Dataset::kImageBytes);
    CHECK_THROWS_WITH(data::decode_cifar_image(bytes.data(), bytes.size(), file, rgb.data()),
                      Catch::Matchers::Contains(reason));
  }
}

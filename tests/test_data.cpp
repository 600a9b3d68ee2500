// Tests of data/cifar.h on small files written here: binary records, PNG/JPEG class folders,
// the decoded-folder cache, every bad-input error, synthetic data and subsets.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "data/cifar.h"
#include "engine/error.h"

// Static, so that no other translation unit's copy can clash with this one.
#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using data::Dataset;

namespace {

// A fresh folder under the system temp dir, removed with everything in it at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    path = fs::temp_directory_path() /
           ("engine_test_data_" + std::to_string(rd()) + "_" + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& rel) const { return (path / rel).string(); }
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// The pixel value a test record stores for (record, channel, pixel index).
uint8_t record_pixel(int64_t r, int c, int p) { return static_cast<uint8_t>((r * 7 + c * 85 + p * 3) % 256); }

// Official-format records: label byte, then the R, G and B planes.
std::vector<uint8_t> make_records(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> bytes;
  for (size_t r = 0; r < labels.size(); ++r) {
    bytes.push_back(labels[r]);
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; ++p) bytes.push_back(record_pixel(static_cast<int64_t>(r), c, p));
  }
  return bytes;
}

// Pixel values of test image `k`: distinct per image, position and channel.
std::vector<uint8_t> image_pixels(int k, int w = 32, int h = 32) {
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((k * 31 + i * 5) % 256);
  return px;
}

void write_png(const std::string& path, const std::vector<uint8_t>& px, int w = 32, int h = 32) {
  fs::create_directories(fs::path(path).parent_path());
  REQUIRE(stbi_write_png(path.c_str(), w, h, 3, px.data(), w * 3) != 0);
}

// split_dir/<class>/{b,a}.png for all 10 classes: image k = 2 * class + (a ? 0 : 1).
void write_class_folders(const std::string& split_dir, int offset = 0) {
  const auto& names = data::cifar10_class_names();
  for (int c = 0; c < 10; ++c) {
    const std::string dir = split_dir + "/" + names[c];
    write_png(dir + "/b.png", image_pixels(offset + 2 * c + 1));  // written first, sorts second
    write_png(dir + "/a.png", image_pixels(offset + 2 * c));
  }
}

bool same(const Dataset& a, const Dataset& b) { return a.images == b.images && a.labels == b.labels; }

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path());
  return out;
}

}  // namespace

TEST_CASE("binary records: R, G, B planes become HWC pixels, labels kept", "[data]") {
  TempDir tmp;
  const std::string path = tmp / "small.bin";
  write_bytes(path, make_records({3, 0, 9}));
  const Dataset d = data::read_cifar_binary_records(path);
  REQUIRE(d.size() == 3);
  REQUIRE(d.images.size() == 3 * 3072u);
  CHECK(d.labels == std::vector<int32_t>{3, 0, 9});
  int64_t mismatches = 0;
  for (int64_t r = 0; r < 3; ++r)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c)
          mismatches += d.image(r)[(y * 32 + x) * 3 + c] != record_pixel(r, c, y * 32 + x);
  CHECK(mismatches == 0);
}

TEST_CASE("binary: the strict reader takes exactly 10,000 records per file", "[data]") {
  TempDir tmp;
  std::vector<uint8_t> labels(10000);
  for (int i = 0; i < 10000; ++i) labels[i] = static_cast<uint8_t>(i % 10);
  const std::string full = tmp / "data_batch_1.bin";
  write_bytes(full, make_records(labels));
  const Dataset d = data::read_cifar_binary({full});
  REQUIRE(d.size() == 10000);
  CHECK(d.labels[9999] == 9);
  CHECK(d.image(9999)[(5 * 32 + 7) * 3 + 2] == record_pixel(9999, 2, 5 * 32 + 7));

  const std::string small = tmp / "data_batch_2.bin";
  write_bytes(small, make_records({1, 2}));
  REQUIRE_THROWS_WITH(data::read_cifar_binary({full, small}),
                      Contains("data_batch_2.bin") && Contains("6146 bytes") && Contains("30730000"));
  // The lenient reader takes the same small file.
  CHECK(data::read_cifar_binary_records(small).size() == 2);
}

TEST_CASE("binary: missing file, bad size and bad label are clear errors", "[data]") {
  TempDir tmp;
  const std::string missing = tmp / "nope.bin";
  REQUIRE_THROWS_WITH(data::read_cifar_binary({missing}), Contains(missing) && Contains("not found"));
  REQUIRE_THROWS_WITH(data::read_cifar_binary_records(missing), Contains(missing) && Contains("not found"));
  REQUIRE_THROWS_AS(data::read_cifar_binary({}), engine::Error);

  const std::string ragged = tmp / "ragged.bin";
  auto bytes = make_records({1, 2});
  bytes.resize(bytes.size() - 5);  // truncated mid-record
  write_bytes(ragged, bytes);
  REQUIRE_THROWS_WITH(data::read_cifar_binary_records(ragged),
                      Contains("ragged.bin") && Contains("6141 bytes"));
  const std::string empty = tmp / "empty.bin";
  write_bytes(empty, {});
  REQUIRE_THROWS_WITH(data::read_cifar_binary_records(empty), Contains("empty.bin") && Contains("0 bytes"));

  const std::string bad_label = tmp / "bad_label.bin";
  write_bytes(bad_label, make_records({0, 9, 10, 3}));
  REQUIRE_THROWS_WITH(data::read_cifar_binary_records(bad_label),
                      Contains("bad_label.bin") && Contains("record 2") && Contains("label 10"));
}

TEST_CASE("image folders: labels in CIFAR-10 class order, files sorted by name", "[data]") {
  TempDir tmp;
  const std::string split = tmp / "train";
  write_class_folders(split);
  write_bytes(split + "/cat/notes.txt", {'h', 'i'});  // not an image: ignored
  const Dataset d = data::read_image_folder(split);
  REQUIRE(d.size() == 20);
  for (int k = 0; k < 20; ++k) {
    INFO("image " << k);
    CHECK(d.labels[k] == k / 2);
    CHECK(std::equal(d.image(k), d.image(k) + 3072, image_pixels(k).begin()));
  }
}

TEST_CASE("image folders: JPEGs and grey PNGs decode to RGB", "[data]") {
  TempDir tmp;
  const std::string split = tmp / "test";
  write_class_folders(split);
  // A flat-colour JPEG (lossy: compare loosely) and a 1-channel PNG, both in 'ship'.
  std::vector<uint8_t> flat(32 * 32 * 3);
  for (size_t i = 0; i < flat.size(); i += 3) flat[i] = 200, flat[i + 1] = 40, flat[i + 2] = 90;
  const std::string jpg = split + "/ship/c.JPG";
  REQUIRE(stbi_write_jpg(jpg.c_str(), 32, 32, 3, flat.data(), 95) != 0);
  std::vector<uint8_t> grey(32 * 32, 77);
  const std::string png = split + "/ship/d.png";
  REQUIRE(stbi_write_png(png.c_str(), 32, 32, 1, grey.data(), 32) != 0);

  const Dataset d = data::read_image_folder(split);
  REQUIRE(d.size() == 22);
  // ship = class 8: a.png, b.png, c.JPG, d.png sit at 16..19.
  CHECK(d.labels[18] == 8);
  CHECK(d.labels[19] == 8);
  int worst = 0;
  for (int p = 0; p < 1024; ++p)
    for (int c = 0; c < 3; ++c) worst = std::max(worst, std::abs(d.image(18)[p * 3 + c] - flat[p * 3 + c]));
  CHECK(worst <= 4);
  CHECK(std::all_of(d.image(19), d.image(19) + 3072, [](uint8_t v) { return v == 77; }));
}

TEST_CASE("image folders: missing or empty folders are errors naming them", "[data]") {
  TempDir tmp;
  const std::string missing = tmp / "nowhere";
  REQUIRE_THROWS_WITH(data::read_image_folder(missing), Contains(missing) && Contains("does not exist"));
  const std::string empty = tmp / "empty";
  fs::create_directories(empty);
  REQUIRE_THROWS_WITH(data::read_image_folder(empty), Contains(empty) && Contains("empty"));

  const std::string split = tmp / "train";
  write_class_folders(split);
  fs::remove_all(split + "/cat");
  REQUIRE_THROWS_WITH(data::read_image_folder(split), Contains("class folder 'cat'"));
  fs::create_directories(split + "/cat");
  REQUIRE_THROWS_WITH(data::read_image_folder(split), Contains("cat") && Contains("no .jpg/.jpeg/.png"));
}

TEST_CASE("image folders: corrupt and wrongly sized images are refused, naming the file", "[data]") {
  TempDir tmp;
  const std::string split = tmp / "train";
  write_class_folders(split);

  SECTION("random bytes named .jpg") {
    std::mt19937 gen(42);
    std::vector<uint8_t> junk(700);
    for (auto& b : junk) b = static_cast<uint8_t>(gen());
    write_bytes(split + "/dog/zz_corrupt.jpg", junk);
    REQUIRE_THROWS_WITH(data::read_image_folder(split),
                        Contains("zz_corrupt.jpg") && Contains("cannot decode"));
  }
  SECTION("a truncated PNG") {
    auto bytes = read_bytes(split + "/frog/a.png");
    bytes.resize(bytes.size() / 2);
    write_bytes(split + "/frog/a.png", bytes);
    REQUIRE_THROWS_WITH(data::read_image_folder(split),
                        Contains("frog/a.png") && Contains("cannot decode"));
  }
  SECTION("31x32") {
    write_png(split + "/deer/narrow.png", image_pixels(0, 31, 32), 31, 32);
    REQUIRE_THROWS_WITH(data::read_image_folder(split), Contains("narrow.png") && Contains("31x32"));
  }
  SECTION("64x64") {
    write_png(split + "/truck/big.png", image_pixels(0, 64, 64), 64, 64);
    REQUIRE_THROWS_WITH(data::read_image_folder(split), Contains("big.png") && Contains("64x64"));
  }
}

TEST_CASE("load_cifar10: finds the layouts, or says what it looked for", "[data]") {
  TempDir tmp;
  REQUIRE(data::find_cifar10(tmp.path.string()).kind == data::CifarLocation::Kind::kNone);
  REQUIRE_THROWS_WITH(data::load_cifar10(tmp.path.string(), "", false),
                      Contains("no CIFAR-10 found") && Contains("data_batch_1") && Contains("cifar10-jpeg"));

  // Binary layout in cifar-10-batches-bin/ with files missing: the missing one is named.
  write_bytes(tmp / "bin/cifar-10-batches-bin/test_batch.bin", make_records({1}));
  const auto loc = data::find_cifar10(tmp / "bin");
  CHECK(loc.kind == data::CifarLocation::Kind::kBinary);
  CHECK(loc.dir == fs::path(tmp / "bin/cifar-10-batches-bin").string());
  REQUIRE_THROWS_WITH(data::load_cifar10(tmp / "bin", "", false),
                      Contains("data_batch_1.bin") && Contains("not found"));

  // Image layout with test/ missing.
  write_class_folders(tmp / "img/train");
  CHECK(data::find_cifar10(tmp / "img").kind == data::CifarLocation::Kind::kImageFolders);
  REQUIRE_THROWS_WITH(data::load_cifar10(tmp / "img", "", false), Contains("test") && Contains("does not exist"));
}

TEST_CASE("load_cifar10: the cache round-trips and is rebuilt when corrupt or stale", "[data]") {
  TempDir tmp;
  const std::string root = tmp / "root";
  write_class_folders(root + "/cifar10-jpeg/train");
  write_class_folders(root + "/cifar10-jpeg/test", 20);
  const std::string cache = tmp / "cache";

  const auto first = data::load_cifar10(root, cache, false);
  CHECK_THAT(first.source, Contains("decoded"));
  REQUIRE(first.train.size() == 20);
  REQUIRE(first.test.size() == 20);
  CHECK(first.test.image(0)[0] == image_pixels(20)[0]);
  const auto cache_files = files_in(cache);
  REQUIRE(cache_files.size() == 1);  // no temporary left behind
  const std::string cache_file = cache_files[0].string();
  CHECK(cache_files[0].extension() == ".u8");

  const auto second = data::load_cifar10(root, cache, false);
  CHECK_THAT(second.source, Contains("from cache"));
  CHECK(same(first.train, second.train));
  CHECK(same(first.test, second.test));

  SECTION("a flipped byte in the payload is caught by the checksum") {
    auto bytes = read_bytes(cache_file);
    bytes[bytes.size() - 100] ^= 0x5A;
    write_bytes(cache_file, bytes);
  }
  SECTION("a truncated cache") {
    auto bytes = read_bytes(cache_file);
    bytes.resize(bytes.size() - 3072);
    write_bytes(cache_file, bytes);
  }
  SECTION("garbage") { write_bytes(cache_file, {'n', 'o', 't', ' ', 'a', ' ', 'c', 'a', 'c', 'h', 'e'}); }

  const auto rebuilt = data::load_cifar10(root, cache, false);
  CHECK_THAT(rebuilt.source, Contains("decoded"));
  CHECK(same(first.train, rebuilt.train));
  CHECK(same(first.test, rebuilt.test));
  const auto again = data::load_cifar10(root, cache, false);
  CHECK_THAT(again.source, Contains("from cache"));
  CHECK(same(first.train, again.train));
}

TEST_CASE("load_cifar10: a changed folder makes the cache stale, a failed write only warns", "[data]") {
  TempDir tmp;
  const std::string root = tmp / "root";
  write_class_folders(root + "/train");
  write_class_folders(root + "/test");
  const std::string cache = tmp / "cache";
  REQUIRE(data::load_cifar10(root, cache, false).train.size() == 20);

  write_png(root + "/train/horse/c.png", image_pixels(99));
  const auto grown = data::load_cifar10(root, cache, false);
  CHECK_THAT(grown.source, Contains("decoded"));
  REQUIRE(grown.train.size() == 21);
  CHECK(grown.train.labels[16] == 7);  // horse: a, b, c at 14..16
  CHECK(std::equal(grown.train.image(16), grown.train.image(16) + 3072, image_pixels(99).begin()));
  CHECK(files_in(cache).size() == 1);  // replaced in place, not a second file
  CHECK_THAT(data::load_cifar10(root, cache, false).source, Contains("from cache"));

  // A cache folder that cannot be created (its parent is a file): data still loads.
  write_bytes(tmp / "a_file", {'x'});
  const auto no_cache = data::load_cifar10(root, tmp / "a_file/cache", false);
  CHECK(no_cache.train.size() == 21);
  CHECK(same(no_cache.train, grown.train));
}

TEST_CASE("synthetic_cifar: deterministic from the seed, balanced, not separable by mean colour", "[data]") {
  const auto a = data::synthetic_cifar(2000, 1000, 5);
  const auto b = data::synthetic_cifar(2000, 1000, 5);
  const auto c = data::synthetic_cifar(2000, 1000, 6);
  CHECK(same(a.train, b.train));
  CHECK(same(a.test, b.test));
  // (Compared as bools: Catch would print whole vectors on failure.)
  const bool other_seed_same = a.train.images == c.train.images;
  CHECK_FALSE(other_seed_same);
  const bool test_repeats_train = std::equal(a.test.images.begin(), a.test.images.end(), a.train.images.begin());
  CHECK_FALSE(test_repeats_train);
  REQUIRE(a.train.size() == 2000);
  REQUIRE(a.test.size() == 1000);
  CHECK(data::synthetic_class_names().size() == 10);

  for (const Dataset* d : {&a.train, &a.test}) {
    std::vector<int64_t> count(10, 0);
    for (int32_t l : d->labels) {
      REQUIRE(l >= 0);
      REQUIRE(l < 10);
      ++count[l];
    }
    CHECK(std::all_of(count.begin(), count.end(), [&](int64_t n) { return n == d->size() / 10; }));
  }

  // Nearest class mean on the mean colour alone stays near chance (10%).
  auto mean_rgb = [](const Dataset& d, int64_t i, double* m) {
    for (int ch = 0; ch < 3; ++ch) {
      double s = 0;
      for (int p = 0; p < 1024; ++p) s += d.image(i)[p * 3 + ch];
      m[ch] = s / 1024;
    }
  };
  std::vector<double> centre(30, 0.0);
  for (int64_t i = 0; i < a.train.size(); ++i) {
    double m[3];
    mean_rgb(a.train, i, m);
    for (int ch = 0; ch < 3; ++ch) centre[a.train.labels[i] * 3 + ch] += m[ch] / 200;
  }
  int right = 0;
  for (int64_t i = 0; i < a.test.size(); ++i) {
    double m[3];
    mean_rgb(a.test, i, m);
    int best = 0;
    double best_d = 1e30;
    for (int k = 0; k < 10; ++k) {
      double dist = 0;
      for (int ch = 0; ch < 3; ++ch) dist += (m[ch] - centre[k * 3 + ch]) * (m[ch] - centre[k * 3 + ch]);
      if (dist < best_d) best_d = dist, best = k;
    }
    right += best == a.test.labels[i];
  }
  CHECK(right < 200);

  // The pattern is visible: pixel values spread out within an image.
  double spread = 0;
  for (int64_t i = 0; i < 100; ++i) {
    auto [lo, hi] = std::minmax_element(a.train.image(i), a.train.image(i) + 3072);
    spread += (*hi - *lo) / 100.0;
  }
  CHECK(spread > 100);
}

TEST_CASE("subset: deterministic, class-balanced, round-robin over classes", "[data]") {
  // 135 images: class k has 3 * (k + 1) of them, class 9 none; shuffled.
  Dataset d;
  for (int k = 0; k < 9; ++k)
    for (int j = 0; j < 3 * (k + 1); ++j) d.labels.push_back(k);
  std::mt19937 gen(1);
  std::shuffle(d.labels.begin(), d.labels.end(), gen);
  d.images.resize(d.labels.size() * 3072);
  for (int64_t i = 0; i < d.size(); ++i) d.images[i * 3072] = static_cast<uint8_t>(i);  // tag

  const Dataset s = data::subset(d, 18);
  REQUIRE(s.size() == 18);
  for (int64_t i = 0; i < 18; ++i) CHECK(s.labels[i] == i % 9);  // class 9 is skipped
  // Within each class, the first images in the original order.
  for (int k = 0; k < 9; ++k) {
    std::vector<uint8_t> want;
    for (int64_t i = 0; i < d.size() && want.size() < 2; ++i)
      if (d.labels[i] == k) want.push_back(static_cast<uint8_t>(i));
    CHECK(s.image(k)[0] == want[0]);
    CHECK(s.image(9 + k)[0] == want[1]);
  }
  CHECK(same(s, data::subset(d, 18)));

  // Class 0 (3 images) runs out first; the rest keep going round.
  const Dataset t = data::subset(d, 40);
  CHECK(std::count(t.labels.begin(), t.labels.end(), 0) == 3);
  CHECK(std::count(t.labels.begin(), t.labels.end(), 8) == 4);

  const Dataset all = data::subset(d, 100000);
  CHECK(all.size() == d.size());
  CHECK(data::subset(d, 0).size() == 0);
  REQUIRE_THROWS_AS(data::subset(d, -1), engine::Error);
}

TEST_CASE("decode_image refuses a header over 1024x1024 with the limit in the message", "[data]") {
  // A PNG of 45 bytes that claims 4096 x 3000 pixels (36 MB of RGB) is refused, naming the
  // limit; so is the same header at 1024 x 1024, which has no pixel data to decode.
  auto png_header = [](uint32_t w, uint32_t h) {
    std::vector<uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
    for (uint32_t v : {w, h})
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
    for (int v : {8, 2, 0, 0, 0}) b.push_back(static_cast<uint8_t>(v));  // 8-bit RGB, no interlace
    for (int i = 0; i < 4; ++i) b.push_back(0);        // CRC (stb_image does not check it)
    const uint8_t iend[] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
    b.insert(b.end(), std::begin(iend), std::end(iend));
    return b;
  };
  const auto huge = png_header(4096, 3000);
  // stb's reason for the first is its size limit ("too large"); the second gets past it.
  REQUIRE_THROWS_WITH(data::decode_image(huge.data(), huge.size(), "huge.png"),
                      Contains("cannot decode image 'huge.png': too large") && Contains("up to 1024x1024 are read"));
  const auto fits = png_header(1024, 1024);
  REQUIRE_THROWS_WITH(data::decode_image(fits.data(), fits.size(), "empty.png"),
                      Contains("cannot decode image 'empty.png'") && !Contains("too large"));
}

// CIFAR-10 on the host: readers for the official binary batches and for image folders
// (stb_image), a cache of decoded folders, a synthetic stand-in, and class-balanced subsets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace data {

// Images as uint8 NHWC (32x32x3, RGB), labels 0..9. Stays on the host; the engine uploads it.
struct Dataset {
  static constexpr int kH = 32, kW = 32, kC = 3, kClasses = 10;
  static constexpr int64_t kImageBytes = int64_t{kH} * kW * kC;  // 3072

  std::vector<uint8_t> images;  // size() * 3072; image i at i * 3072, row-major H, W, then C
  std::vector<int32_t> labels;  // size()

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  const uint8_t* image(int64_t i) const { return images.data() + i * kImageBytes; }
};

struct CifarSplits {
  Dataset train, test;
  std::string source;  // where it came from, for the log (folder, format, cache)
};

// Official binary format: each record is 1 label byte, then 1024 R, 1024 G, 1024 B bytes
// (each plane row-major); every official file holds exactly 10,000 records.
constexpr int64_t kCifarRecordBytes = 1 + Dataset::kImageBytes;  // 3073
constexpr int64_t kCifarRecordsPerFile = 10000;
constexpr int64_t kCifarFileBytes = kCifarRecordBytes * kCifarRecordsPerFile;  // 30,730,000

// airplane automobile bird cat deer dog frog horse ship truck (label order).
const std::vector<std::string>& cifar10_class_names();

// Lenient, low-level: any file whose size is a positive multiple of 3,073 bytes (tests build
// small ones). Planes are converted to HWC; a label > 9 is an error naming the record.
Dataset read_cifar_binary_records(const std::string& path);
// The same on a file's bytes in memory; `path` names it in errors.
Dataset parse_cifar_binary_records(const std::vector<uint8_t>& bytes, const std::string& path);

// Strict, for the real data: every file must be exactly 30,730,000 bytes. Files are
// concatenated in the order given.
Dataset read_cifar_binary(const std::vector<std::string>& files);

// split_dir/<class>/*.jpg|*.jpeg|*.png (extensions case-insensitive, other files ignored) for
// the 10 CIFAR-10 class names; labels follow the class order, files within a class are sorted
// by name. Every image must be 32x32. Decodes on several threads; the result does not depend
// on their number. verbose: progress on stderr.
Dataset read_image_folder(const std::string& split_dir, bool verbose = false);

// A .jpg, .jpeg or .png name (case-insensitive): what the folder readers and predict read.
bool is_image_name(const std::string& path);

// One PNG or JPEG of any size up to 1024x1024 (what predict reads), as RGB rows.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3
};
Image read_image(const std::string& path);
constexpr int kMaxImageSide = 1024;  // larger headers are refused before any pixel is allocated
// The same on a file's bytes in memory; `path` names it in errors.
Image decode_image(const uint8_t* bytes, size_t size, const std::string& path);
// One image of an image folder: exactly 32x32, any channels, written as RGB to dst (3,072 bytes).
void decode_cifar_image(const uint8_t* bytes, size_t size, const std::string& name, uint8_t* dst);

// Bilinear resampling with half-pixel centres (OpenCV's INTER_LINEAR, PyTorch's
// interpolate(mode="bilinear", align_corners=False) without antialiasing): each output pixel
// blends the 2x2 input pixels around its centre, so shrinking by more than 2x skips pixels
// (aliasing); rounded to the nearest integer. Returns out_h * out_w * 3 bytes.
std::vector<uint8_t> resize_bilinear(const Image& img, int out_w, int out_h);

// Where load_cifar10 would read from. Lets the trainer fall back to synthetic data only when
// nothing is there at all (a broken data set stays an error).
struct CifarLocation {
  enum class Kind { kNone, kBinary, kImageFolders };
  Kind kind = Kind::kNone;
  std::string dir;  // the folder holding the batches or train/ + test/
};
CifarLocation find_cifar10(const std::string& root);

// Looks in root and root/cifar-10-batches-bin for the binary batches (data_batch_1..5.bin +
// test_batch.bin), then in root and root/cifar10-jpeg for train/ + test/ image folders.
// Image folders are decoded once and cached in cache_dir (empty: no cache) as
// cifar10-<hash of the folder path>.u8; the cache is used while its fingerprint (file names,
// sizes and times) still matches and its checksum holds, else it is rebuilt. Binary batches
// are not cached: reading them is already as fast as reading a cache.
CifarSplits load_cifar10(const std::string& root, const std::string& cache_dir, bool verbose);

// A learnable stand-in for CIFAR-10 when none is available: 10 pattern classes (stripes in
// three orientations and two scales, checkerboards in two scales, rings, a disc) in random
// colours, positions and phases, plus noise. Every class is closed under horizontal flips and
// shifts (so augmentation keeps labels right) and the mean colour carries no class
// information. Deterministic from the seed; labels balanced (exactly when n is a multiple
// of 10); train and test are drawn from separate streams.
CifarSplits synthetic_cifar(int64_t n_train, int64_t n_test, uint64_t seed);
// The synthetic classes in label order (h-stripes-wide ... cross), for logs.
const std::vector<std::string>& synthetic_class_names();

// The first n images taken round-robin over the classes (class 0, 1, ..., 9, 0, ...), each
// class in its original order: deterministic and balanced, and every prefix is balanced
// too. n >= d.size() gives all of d, reordered the same way; n < 0 is an error.
Dataset subset(const Dataset& d, int64_t n);

}  // namespace data

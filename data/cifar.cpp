// CIFAR-10 readers (binary batches, image folders via stb_image), the decoded-folder cache,
// the synthetic stand-in and class-balanced subsets. stb_image is compiled here and only here.
#include "data/cifar.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <thread>

#include "engine/error.h"

// Refuse big headers before stb allocates anything; read only the two formats we accept.
#define STBI_MAX_DIMENSIONS 1024  // data::kMaxImageSide
#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_NO_STDIO  // we read the files ourselves, so errors name them our way
// stb's internal assert()s are off in release builds (NDEBUG) and fire on corrupt JPEG data in
// builds without NDEBUG (the fuzzers'): one behaviour everywhere, the release one. What guards
// memory there is the sanitizers' bounds checks, which stay on.
#define STBI_ASSERT(x) ((void)0)
// No allocation of stb's above 64 MiB (a 1024x1024 RGBA image and its zlib buffers need far
// less): a small PNG of compressed zeros would otherwise grow its inflate buffer to gigabytes
// (stbi__zexpand), on every decoding thread at once. Past the cap stb fails with "outofmem".
#define STBI_MALLOC(bytes) ((bytes) <= (size_t{64} << 20) ? std::malloc(bytes) : nullptr)
#define STBI_REALLOC(p, bytes) ((bytes) <= (size_t{64} << 20) ? std::realloc(p, bytes) : nullptr)
#define STBI_FREE(p) std::free(p)
#define STB_IMAGE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wtype-limits"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop
static_assert(data::kMaxImageSide == STBI_MAX_DIMENSIONS, "predict's stated limit is stb_image's");

namespace data {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int64_t kPixels = int64_t{Dataset::kH} * Dataset::kW;  // 1024 per plane

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- hashing (cache names, fingerprints, checksums) -------------------------------------

uint64_t mix64(uint64_t z) {  // splitmix64's finalizer: a good 64-bit bijective scramble
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Word-at-a-time so that checksumming the 184 MB cache costs tens of milliseconds.
class Hasher {
 public:
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, b + i, 8);
      word(w);
    }
    uint64_t tail = 0;
    for (size_t k = 0; i + k < n; ++k) tail |= uint64_t{b[i + k]} << (8 * k);
    word(tail ^ (uint64_t{n} << 56));  // the length keeps "ab" and "ab\0" apart
  }
  void u64(uint64_t v) { word(v); }
  void str(const std::string& s) { bytes(s.data(), s.size()); }
  uint64_t digest() const { return mix64(h_); }

 private:
  void word(uint64_t w) {
    h_ = (h_ ^ w) * 0x100000001B3ULL;
    h_ ^= h_ >> 29;
  }
  uint64_t h_ = 0x9E3779B97F4A7C15ULL;
};

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// ---- threads ---------------------------------------------------------------------------

int worker_count(int64_t items, int64_t chunk) {
  unsigned hw = std::thread::hardware_concurrency();
  int64_t t = std::clamp<int64_t>(hw == 0 ? 2 : hw, 1, 16);
  return static_cast<int>(std::clamp<int64_t>((items + chunk - 1) / chunk, 1, t));
}

// Runs fn(i) for i in [0, n) on several threads. Each i writes only its own output slot, so
// the result does not depend on scheduling. The first error (lowest i among those seen)
// is rethrown here; progress(done) is called, serialized, after each chunk.
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn,
                  const std::function<void(int64_t)>& progress = nullptr) {
  constexpr int64_t kChunk = 64;
  if (n <= 0) return;
  std::atomic<int64_t> next{0}, done{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  int64_t error_index = -1;
  std::exception_ptr error;

  auto worker = [&] {
    for (;;) {
      int64_t begin = next.fetch_add(kChunk);
      if (begin >= n || failed.load()) return;
      int64_t end = std::min(n, begin + kChunk);
      for (int64_t i = begin; i < end; ++i) {
        try {
          fn(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (error_index < 0 || i < error_index) {
            error_index = i;
            error = std::current_exception();
          }
          failed = true;
          return;
        }
      }
      int64_t d = done.fetch_add(end - begin) + (end - begin);
      if (progress) {
        std::lock_guard<std::mutex> lock(mu);
        progress(d);
      }
    }
  };
  int threads = worker_count(n, kChunk);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& th : pool) th.join();
  if (error) std::rethrow_exception(error);
}

// ---- files -----------------------------------------------------------------------------

uint64_t file_size_or_fail(const fs::path& p, const char* what) {
  std::error_code ec;
  ENGINE_CHECK(fs::exists(p, ec), what << " '" << p.string() << "' not found");
  ENGINE_CHECK(fs::is_regular_file(p, ec), what << " '" << p.string() << "' is not a regular file");
  uint64_t size = fs::file_size(p, ec);
  ENGINE_CHECK(!ec, "cannot read the size of " << what << " '" << p.string() << "': " << ec.message());
  return size;
}

void read_file_into(const fs::path& p, uint64_t size, std::vector<uint8_t>& out, const char* what) {
  std::ifstream in(p, std::ios::binary);
  ENGINE_CHECK(in, "cannot open " << what << " '" << p.string() << "'");
  out.resize(size);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(size));
  ENGINE_CHECK(static_cast<uint64_t>(in.gcount()) == size,
               "cannot read " << what << " '" << p.string() << "': got " << in.gcount() << " of "
                              << size << " bytes");
}

// ---- binary batches --------------------------------------------------------------------

// Appends the records of one file: label byte, then R, G, B planes -> interleaved HWC.
void append_records(const std::string& path, const std::vector<uint8_t>& bytes, Dataset& out) {
  const int64_t n = static_cast<int64_t>(bytes.size()) / kCifarRecordBytes;
  const int64_t base = out.size();
  out.labels.resize(base + n);
  out.images.resize((base + n) * Dataset::kImageBytes);
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    ENGINE_CHECK(rec[0] < Dataset::kClasses, "CIFAR-10 file '" << path << "': record " << r
                                                 << " has label " << int{rec[0]}
                                                 << " (labels are 0..9)");
    out.labels[base + r] = rec[0];
    const uint8_t* planes = rec + 1;
    uint8_t* dst = out.images.data() + (base + r) * Dataset::kImageBytes;
    for (int64_t p = 0; p < kPixels; ++p) {
      dst[3 * p + 0] = planes[p];
      dst[3 * p + 1] = planes[kPixels + p];
      dst[3 * p + 2] = planes[2 * kPixels + p];
    }
  }
}

const char* const kBinaryTrainFiles[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                         "data_batch_4.bin", "data_batch_5.bin"};
const char* const kBinaryTestFile = "test_batch.bin";

// ---- image folders ---------------------------------------------------------------------

struct ImageFile {
  fs::path path;
  int32_t label;
  uint64_t size;
  int64_t mtime;  // only for the cache fingerprint
};

std::vector<ImageFile> list_image_folder(const std::string& split_dir) {
  std::error_code ec;
  ENGINE_CHECK(fs::is_directory(split_dir, ec),
               "image folder '" << split_dir << "' does not exist (or is not a folder)");
  ENGINE_CHECK(!fs::is_empty(split_dir, ec), "image folder '" << split_dir << "' is empty");
  const auto& names = cifar10_class_names();
  std::vector<ImageFile> files;
  for (int c = 0; c < Dataset::kClasses; ++c) {
    fs::path dir = fs::path(split_dir) / names[c];
    ENGINE_CHECK(fs::is_directory(dir, ec),
                 "image folder '" << split_dir << "' has no class folder '" << names[c]
                                  << "' (expected one folder per CIFAR-10 class: airplane "
                                     "automobile bird cat deer dog frog horse ship truck)");
    std::vector<ImageFile> cls;
    fs::directory_iterator it(dir, ec), end;
    ENGINE_CHECK(!ec, "cannot list '" << dir.string() << "': " << ec.message());
    for (; it != end; it.increment(ec)) {
      ENGINE_CHECK(!ec, "cannot list '" << dir.string() << "': " << ec.message());
      if (!is_image_name(it->path().string()) || !it->is_regular_file(ec)) continue;
      ImageFile f{it->path(), c, 0, 0};
      f.size = fs::file_size(f.path, ec);
      ENGINE_CHECK(!ec, "cannot read the size of '" << f.path.string() << "': " << ec.message());
      f.mtime = static_cast<int64_t>(fs::last_write_time(f.path, ec).time_since_epoch().count());
      cls.push_back(std::move(f));
    }
    ENGINE_CHECK(!cls.empty(), "class folder '" << dir.string() << "' has no .jpg/.jpeg/.png images");
    std::sort(cls.begin(), cls.end(), [](const ImageFile& a, const ImageFile& b) {
      return a.path.filename().string() < b.path.filename().string();
    });
    for (auto& f : cls) files.push_back(std::move(f));
  }
  return files;
}

void decode_image(const ImageFile& f, std::vector<uint8_t>& buf, uint8_t* dst) {
  const std::string name = f.path.string();
  // A 32x32 image is a few KB; anything huge is not one, and must not be read into memory.
  ENGINE_CHECK(f.size <= (16u << 20), "image '" << name << "' is " << f.size
                                                << " bytes, far too large for a 32x32 image");
  read_file_into(f.path, f.size, buf, "image");
  decode_cifar_image(buf.data(), buf.size(), name, dst);
}

}  // namespace

namespace {

// What stb_image 2.27 (Debian 12's libstb-dev) mishandles in the JPEG segments it reads,
// found by tests/fuzz (tests/fuzz/regressions/README.md; stb 2.28 checks both itself):
//  - a Huffman table whose 16 code counts add up to more than 256: it writes past its
//    257-entry size table (regressions/image/jpeg-dht-over-256-codes);
//  - a scan naming a table no DHT segment defined: it decodes with the table's uninitialised
//    contents and reads its symbols far out of bounds (jpeg-huffman-symbol-index-negative).
// Both are invalid JPEG. The markers are walked in order as stb reads them (fill bytes; stray
// bytes before the frame header; segments by their length; entropy-coded data up to the next
// marker that is not stuffing or a restart), so no segment stb reads is missed.
enum class JpegFault { None, TooManyCodes, UndefinedTable };

JpegFault jpeg_fault(const uint8_t* b, size_t n) {
  const auto at = [&](size_t i) -> unsigned { return i < n ? b[i] : 0u; };
  bool dc[4] = {}, ac[4] = {}, progressive = false, frame = false;
  size_t pos = 0;
  while (pos < n && b[pos] == 0xFF) ++pos;  // fill bytes, then SOI (D8)
  ++pos;
  while (pos + 1 < n) {
    if (b[pos] != 0xFF) {  // before the frame header stb skips stray bytes; after it, it stops
      if (frame) return JpegFault::None;
      ++pos;
      continue;
    }
    while (pos < n && b[pos] == 0xFF) ++pos;
    if (pos >= n) return JpegFault::None;
    const unsigned m = b[pos++];
    if (m == 0xD9) return JpegFault::None;                               // EOI
    if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7)) return JpegFault::None;   // stb: "unknown marker", stops
    const size_t length = at(pos) << 8 | at(pos + 1);
    const size_t end = pos + length;
    if (m == 0xC4) {  // DHT: tables until the segment's length is used up, as stb reads them
      size_t q = pos + 2;
      long left = static_cast<long>(length) - 2;
      while (left > 0 && q < n) {
        const unsigned tc = at(q) >> 4, th = at(q) & 15;
        if (tc > 1 || th > 3) return JpegFault::None;  // stb stops with an error
        unsigned codes = 0;
        for (int k = 0; k < 16; ++k) codes += at(q + 1 + k);
        if (codes > 256) return JpegFault::TooManyCodes;
        (tc == 0 ? dc : ac)[th] = true;
        q += 17 + codes;
        left -= 17 + static_cast<long>(codes);
      }
      pos = q;  // stb goes on from where its reads ended
      continue;
    }
    if (m == 0xC0 || m == 0xC1 || m == 0xC2) {
      frame = true;
      progressive = m == 0xC2;
    }
    if (m == 0xDA) {  // SOS: each component's DC and/or AC table must exist by now
      const unsigned components = at(pos + 2);
      const size_t spectral = pos + 3 + 2 * components;
      const bool uses_dc = !progressive || at(spectral) == 0, uses_ac = !progressive || at(spectral) != 0;
      for (unsigned c = 0; c < components; ++c) {
        const unsigned tables = at(pos + 4 + 2 * c), td = tables >> 4, ta = tables & 15;
        if (td > 3 || ta > 3) return JpegFault::None;  // stb refuses these itself
        if ((uses_dc && !dc[td]) || (uses_ac && !ac[ta])) return JpegFault::UndefinedTable;
      }
      // The entropy-coded data: up to the next FF that is not stuffing (FF 00), a restart
      // (FF D0-D7) or fill.
      size_t d = end;
      while (d + 1 < n && !(b[d] == 0xFF && b[d + 1] != 0x00 && b[d + 1] != 0xFF && (b[d + 1] < 0xD0 || b[d + 1] > 0xD7)))
        ++d;
      if (d + 1 >= n) return JpegFault::None;
      pos = d;
      continue;
    }
    pos = end;  // any other segment: skipped by its length
  }
  return JpegFault::None;
}

// stb_image grows its buffer to a PNG chunk's declared length before reading the chunk, so a
// 100-byte file declaring a 2 GB IDAT asks for 2 GB (found by tests/fuzz:
// regressions/image/png-idat-declares-2gb). A chunk must fit in the file (IEND, where stb
// stops, without its CRC).
bool png_chunks_fit(const uint8_t* b, size_t n) {
  for (size_t pos = 8; pos + 8 <= n;) {
    if (std::memcmp(b + pos + 4, "IEND", 4) == 0) break;
    const uint64_t length = uint64_t{b[pos]} << 24 | uint64_t{b[pos + 1]} << 16 | uint64_t{b[pos + 2]} << 8 | b[pos + 3];
    if (length + 12 > n - pos) return false;  // length, type, data, CRC
    pos += 12 + length;
  }
  return true;
}

// Refuses, before stb_image sees them, the inputs it is known to mishandle.
void check_before_stb(const uint8_t* bytes, size_t size, const std::string& name) {
  static const uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const bool png = size >= 8 && std::memcmp(bytes, kPngSignature, 8) == 0;
  ENGINE_CHECK(!png || png_chunks_fit(bytes, size),
               "cannot decode image '" << name << "': a PNG chunk runs past the end of the file (truncated or corrupt)");
  // stb takes it for a JPEG when one or more FF bytes lead to D8 (fill bytes are skipped).
  size_t first = 0;
  while (first < size && bytes[first] == 0xFF) ++first;
  const bool jpeg = first > 0 && first < size && bytes[first] == 0xD8;
  const JpegFault fault = jpeg ? jpeg_fault(bytes, size) : JpegFault::None;
  ENGINE_CHECK(fault != JpegFault::TooManyCodes,
               "cannot decode image '" << name << "': a JPEG Huffman table declares more than 256 codes (corrupt or crafted)");
  ENGINE_CHECK(fault != JpegFault::UndefinedTable,
               "cannot decode image '" << name << "': a JPEG scan uses a Huffman table no DHT segment defined (corrupt or crafted)");
}

}  // namespace

void decode_cifar_image(const uint8_t* bytes, size_t size, const std::string& name, uint8_t* dst) {
  auto reason = [] {
    const char* r = stbi_failure_reason();
    return r ? r : "unknown error";
  };
  ENGINE_CHECK(size <= (16u << 20), "image '" << name << "' is " << size << " bytes, far too large for a 32x32 image");
  check_before_stb(bytes, size, name);
  const uint8_t* buf = bytes;
  int w = 0, h = 0, comp = 0;
  const int len = static_cast<int>(size);
  ENGINE_CHECK(stbi_info_from_memory(buf, len, &w, &h, &comp),
               "cannot decode image '" << name << "': " << reason());
  ENGINE_CHECK(w == Dataset::kW && h == Dataset::kH,
               "image '" << name << "' is " << w << "x" << h << "; CIFAR-10 images must be 32x32");
  unsigned char* px = stbi_load_from_memory(buf, len, &w, &h, &comp, Dataset::kC);
  ENGINE_CHECK(px != nullptr, "cannot decode image '" << name << "': " << reason());
  // The header said 32x32, but re-check what was decoded before copying a fixed size.
  bool ok = (w == Dataset::kW && h == Dataset::kH);
  if (ok) std::memcpy(dst, px, Dataset::kImageBytes);
  stbi_image_free(px);
  ENGINE_CHECK(ok, "image '" << name << "' decoded to " << w << "x" << h << ", not 32x32");
}

namespace {

Dataset decode_images(const std::vector<ImageFile>& files, bool verbose, const std::string& what) {
  Dataset d;
  const int64_t n = static_cast<int64_t>(files.size());
  d.labels.resize(n);
  d.images.resize(n * Dataset::kImageBytes);
  const auto t0 = Clock::now();
  int64_t next_report = n / 10;
  auto progress = [&](int64_t done) {  // serialized by parallel_for
    if (!verbose || done < next_report) return;
    std::fprintf(stderr, "[data] decoding %s: %lld/%lld images (%.1f s)\n", what.c_str(),
                 static_cast<long long>(done), static_cast<long long>(n), seconds_since(t0));
    while (next_report <= done) next_report += std::max<int64_t>(1, n / 10);
  };
  parallel_for(
      n,
      [&](int64_t i) {
        thread_local std::vector<uint8_t> buf;  // one read buffer per thread, reused
        decode_image(files[i], buf, d.images.data() + i * Dataset::kImageBytes);
        d.labels[i] = files[i].label;
      },
      progress);
  return d;
}

// ---- cache of decoded image folders ----------------------------------------------------
// Layout (host byte order): 48-byte header {magic[8], u32 version, u32 header bytes,
// u64 fingerprint, i64 n_train, i64 n_test, u64 checksum}, then train labels (1 byte each),
// test labels, train images, test images (NHWC uint8). The checksum covers all after the
// header; the fingerprint is that of the folders the cache was decoded from.

constexpr char kCacheMagic[8] = {'C', 'I', 'F', 'A', 'R', 'U', '8', '\n'};
constexpr uint32_t kCacheVersion = 1;
constexpr size_t kCacheHeaderBytes = 48;
constexpr int64_t kCacheMaxImages = 10'000'000;  // sanity bound before sizes are multiplied

uint64_t folder_fingerprint(const std::vector<ImageFile>& train, const std::vector<ImageFile>& test) {
  Hasher h;
  h.str("cifar10-image-folders-v1");
  for (const auto* files : {&train, &test}) {
    h.u64(files->size());
    for (const auto& f : *files) {
      h.u64(static_cast<uint64_t>(f.label));
      h.str(f.path.filename().string());
      h.u64(f.size);
      h.u64(static_cast<uint64_t>(f.mtime));
    }
  }
  return h.digest();
}

std::vector<uint8_t> labels_as_bytes(const Dataset& d) {
  return std::vector<uint8_t>(d.labels.begin(), d.labels.end());
}

uint64_t payload_checksum(const std::vector<uint8_t>& train_labels,
                          const std::vector<uint8_t>& test_labels, const Dataset& train,
                          const Dataset& test) {
  Hasher h;
  h.bytes(train_labels.data(), train_labels.size());
  h.bytes(test_labels.data(), test_labels.size());
  h.bytes(train.images.data(), train.images.size());
  h.bytes(test.images.data(), test.images.size());
  return h.digest();
}

template <typename T>
void put(uint8_t* header, size_t offset, T v) {
  std::memcpy(header + offset, &v, sizeof v);
}
template <typename T>
T get(const uint8_t* header, size_t offset) {
  T v;
  std::memcpy(&v, header + offset, sizeof v);
  return v;
}

// Reads the cache into `out` if it is complete, current and intact; else says why not.
bool read_cache(const fs::path& path, uint64_t fingerprint, CifarSplits& out, std::string& why) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return why = "no cache yet", false;
  const uint64_t size = fs::file_size(path, ec);
  if (ec || size < kCacheHeaderBytes) return why = "cache too short", false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return why = "cache unreadable", false;
  uint8_t header[kCacheHeaderBytes];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  if (!in || std::memcmp(header, kCacheMagic, 8) != 0) return why = "not a cache file", false;
  if (get<uint32_t>(header, 8) != kCacheVersion || get<uint32_t>(header, 12) != kCacheHeaderBytes)
    return why = "cache from another version", false;
  if (get<uint64_t>(header, 16) != fingerprint) return why = "cache is stale (the images changed)", false;
  const int64_t n_train = get<int64_t>(header, 24), n_test = get<int64_t>(header, 32);
  if (n_train < 0 || n_test < 0 || n_train > kCacheMaxImages || n_test > kCacheMaxImages)
    return why = "cache header corrupt", false;
  if (size != kCacheHeaderBytes + static_cast<uint64_t>(n_train + n_test) * kCifarRecordBytes)
    return why = "cache size does not match its header", false;

  std::vector<uint8_t> train_labels(n_train), test_labels(n_test);
  Dataset train, test;
  train.images.resize(n_train * Dataset::kImageBytes);
  test.images.resize(n_test * Dataset::kImageBytes);
  auto read = [&](void* p, size_t n) { in.read(static_cast<char*>(p), static_cast<std::streamsize>(n)); };
  read(train_labels.data(), train_labels.size());
  read(test_labels.data(), test_labels.size());
  read(train.images.data(), train.images.size());
  read(test.images.data(), test.images.size());
  if (!in) return why = "cache truncated", false;
  if (payload_checksum(train_labels, test_labels, train, test) != get<uint64_t>(header, 40))
    return why = "cache checksum mismatch (corrupt)", false;
  for (const auto* l : {&train_labels, &test_labels})
    for (uint8_t v : *l)
      if (v >= Dataset::kClasses) return why = "cache holds a bad label", false;
  train.labels.assign(train_labels.begin(), train_labels.end());
  test.labels.assign(test_labels.begin(), test_labels.end());
  out.train = std::move(train);
  out.test = std::move(test);
  return true;
}

// Writes to a temporary file, then renames, so a reader never sees half a cache. Failing to
// write is not an error: the data is already decoded; the next run just decodes again.
void write_cache(const fs::path& path, uint64_t fingerprint, const CifarSplits& s, bool verbose) {
  std::random_device rd;
  const fs::path tmp = path.string() + ".tmp-" + hex64((uint64_t{rd()} << 32) ^ rd());
  std::error_code ec;
  std::string failure;
  fs::create_directories(path.parent_path(), ec);
  if (ec) {
    failure = "cannot create the folder: " + ec.message();
  } else {
    const auto train_labels = labels_as_bytes(s.train), test_labels = labels_as_bytes(s.test);
    uint8_t header[kCacheHeaderBytes] = {};
    std::memcpy(header, kCacheMagic, 8);
    put<uint32_t>(header, 8, kCacheVersion);
    put<uint32_t>(header, 12, kCacheHeaderBytes);
    put<uint64_t>(header, 16, fingerprint);
    put<int64_t>(header, 24, s.train.size());
    put<int64_t>(header, 32, s.test.size());
    put<uint64_t>(header, 40, payload_checksum(train_labels, test_labels, s.train, s.test));
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      auto write = [&](const void* p, size_t n) {
        out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
      };
      write(header, sizeof header);
      write(train_labels.data(), train_labels.size());
      write(test_labels.data(), test_labels.size());
      write(s.train.images.data(), s.train.images.size());
      write(s.test.images.data(), s.test.images.size());
      out.flush();
      if (!out) failure = "write failed (disk full or no permission?)";
    }
    if (failure.empty()) {
      fs::rename(tmp, path, ec);
      if (ec) failure = "cannot rename the temporary file: " + ec.message();
    }
    if (!failure.empty()) fs::remove(tmp, ec);
  }
  if (!failure.empty()) {
    std::fprintf(stderr, "warning: could not write the CIFAR-10 cache '%s': %s (continuing without it)\n",
                 path.string().c_str(), failure.c_str());
  } else if (verbose) {
    std::fprintf(stderr, "[data] wrote cache %s\n", path.string().c_str());
  }
}

// ---- synthetic data --------------------------------------------------------------------

class Rng {  // splitmix64: tiny, fast, and enough for image synthesis
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() { return mix64(s_ += 0x9E3779B97F4A7C15ULL); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t s_;
};

uint64_t stream_seed(uint64_t seed, uint64_t split, uint64_t index) {
  return mix64(mix64(seed ^ 0xC1FA5EEDULL) ^ mix64(split * 0x9E3779B97F4A7C15ULL + index));
}

double clamp01(double v) { return v < 0 ? 0 : (v > 1 ? 1 : v); }

// Draws one image of class `label`. v(x, y) in [0, 1] is the foreground weight; colours are
// random per image, so only the shape of v tells the class.
void render_synthetic(int label, Rng& rng, uint8_t* dst) {
  constexpr double kTwoPi = 6.283185307179586, kHalfSqrt2 = 0.7071067811865476;
  double bg[3], fg[3];
  for (;;) {  // enough contrast that every image shows its pattern
    double dist = 0;
    for (int c = 0; c < 3; ++c) {
      bg[c] = rng.uniform(0, 255);
      fg[c] = rng.uniform(0, 255);
      dist += std::fabs(fg[c] - bg[c]);
    }
    if (dist >= 150) break;
  }
  // Patterns fill a random window (position jitter); shapes sit at a random centre.
  const int ww = 16 + static_cast<int>(rng.below(17)), wh = 16 + static_cast<int>(rng.below(17));
  const int wx = static_cast<int>(rng.below(33 - ww)), wy = static_cast<int>(rng.below(33 - wh));
  const double phase = rng.uniform(0, kTwoPi), phase2 = rng.uniform(0, kTwoPi);
  const double jitter = rng.uniform(0.92, 1.08);
  const double cx = rng.uniform(9, 23), cy = rng.uniform(9, 23);
  // Stripes: direction (dx, dy) of the intensity change, and period.
  double dx = 0, dy = 0, period = 0;
  switch (label) {
    case 0: case 1: dy = 1; break;                                          // horizontal bands
    case 2: case 3: dx = 1; break;                                          // vertical bands
    case 4: case 5: dx = (rng.below(2) ? 1 : -1) * kHalfSqrt2; dy = kHalfSqrt2; break;  // +-45 deg
    default: break;
  }
  if (label <= 5) period = (label % 2 == 0 ? 10.0 : 5.0) * jitter;
  const double radius = rng.uniform(5, 10);           // disc
  const double ring_period = 7.0 * jitter, ring_extent = rng.uniform(10, 16);
  const double arm = rng.uniform(7, 12), half_bar = rng.uniform(1.0, 2.0);  // cross

  for (int y = 0; y < Dataset::kH; ++y) {
    for (int x = 0; x < Dataset::kW; ++x) {
      const bool inside = x >= wx && x < wx + ww && y >= wy && y < wy + wh;
      const double d = std::hypot(x - cx, y - cy);
      double v = 0;
      if (label <= 5) {
        if (inside) v = 0.5 + 0.5 * std::sin(kTwoPi * (dx * x + dy * y) / period + phase);
      } else if (label == 6) {  // checkerboard, cells of ~5 px
        if (inside)
          v = 0.5 + 0.5 * std::sin(kTwoPi * x / (10.0 * jitter) + phase) *
                        std::sin(kTwoPi * y / (10.0 * jitter) + phase2);
      } else if (label == 7) {  // concentric rings fading out at ring_extent
        v = (0.5 + 0.5 * std::cos(kTwoPi * d / ring_period + phase)) * clamp01(ring_extent - d);
      } else if (label == 8) {  // filled disc with an anti-aliased edge
        v = clamp01(radius - d + 0.5);
      } else {  // plus-shaped cross
        const double ax = std::fabs(x - cx), ay = std::fabs(y - cy);
        const double hbar = clamp01(half_bar - ay + 0.5) * clamp01(arm - ax + 0.5);
        const double vbar = clamp01(half_bar - ax + 0.5) * clamp01(arm - ay + 0.5);
        v = std::max(hbar, vbar);
      }
      uint8_t* px = dst + (y * Dataset::kW + x) * Dataset::kC;
      // Triangular noise in (-24, 24): each channel sums two 16-bit slices of two draws.
      const uint64_t r[2] = {rng.next(), rng.next()};
      for (int c = 0; c < 3; ++c) {
        auto slice = [&](int k) { return static_cast<double>((r[k / 4] >> (16 * (k % 4))) & 0xFFFF); };
        const double noise = ((slice(2 * c) + slice(2 * c + 1)) / 65535.0 - 1.0) * 24.0;
        const double value = bg[c] + (fg[c] - bg[c]) * v + noise;
        px[c] = static_cast<uint8_t>(std::lround(std::clamp(value, 0.0, 255.0)));
      }
    }
  }
}

Dataset synthetic_split(int64_t n, uint64_t seed, uint64_t split) {
  Dataset d;
  d.labels.resize(n);
  d.images.resize(n * Dataset::kImageBytes);
  for (int64_t i = 0; i < n; ++i) d.labels[i] = static_cast<int32_t>(i % Dataset::kClasses);
  Rng shuffle(stream_seed(seed, split, ~uint64_t{0}));
  for (int64_t i = n - 1; i > 0; --i) std::swap(d.labels[i], d.labels[shuffle.below(i + 1)]);
  parallel_for(n, [&](int64_t i) {
    Rng rng(stream_seed(seed, split, static_cast<uint64_t>(i)));
    render_synthetic(d.labels[i], rng, d.images.data() + i * Dataset::kImageBytes);
  });
  return d;
}

}  // namespace

// ---- public API ------------------------------------------------------------------------

const std::vector<std::string>& cifar10_class_names() {
  static const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                 "dog",      "frog",       "horse", "ship", "truck"};
  return names;
}

const std::vector<std::string>& synthetic_class_names() {
  static const std::vector<std::string> names = {
      "h-stripes-wide", "h-stripes-narrow", "v-stripes-wide", "v-stripes-narrow", "d-stripes-wide",
      "d-stripes-narrow", "checkerboard", "rings", "disc", "cross"};
  return names;
}

Dataset read_cifar_binary_records(const std::string& path) {
  const uint64_t size = file_size_or_fail(path, "CIFAR-10 file");
  ENGINE_CHECK(size > 0 && size % kCifarRecordBytes == 0,
               "CIFAR-10 file '" << path << "' has " << size
                                 << " bytes; expected a positive multiple of 3073 (1 label byte + "
                                    "3072 pixel bytes per record)");
  std::vector<uint8_t> bytes;
  read_file_into(path, size, bytes, "CIFAR-10 file");
  return parse_cifar_binary_records(bytes, path);
}

Dataset parse_cifar_binary_records(const std::vector<uint8_t>& bytes, const std::string& path) {
  ENGINE_CHECK(!bytes.empty() && bytes.size() % kCifarRecordBytes == 0,
               "CIFAR-10 file '" << path << "' has " << bytes.size()
                                 << " bytes; expected a positive multiple of 3073 (1 label byte + "
                                    "3072 pixel bytes per record)");
  Dataset d;
  append_records(path, bytes, d);
  return d;
}

Dataset read_cifar_binary(const std::vector<std::string>& files) {
  ENGINE_CHECK(!files.empty(), "read_cifar_binary: no files given");
  Dataset d;
  d.labels.reserve(files.size() * kCifarRecordsPerFile);
  d.images.reserve(files.size() * kCifarRecordsPerFile * Dataset::kImageBytes);
  std::vector<uint8_t> bytes;
  for (const auto& path : files) {
    const uint64_t size = file_size_or_fail(path, "CIFAR-10 file");
    ENGINE_CHECK(size == static_cast<uint64_t>(kCifarFileBytes),
                 "CIFAR-10 file '" << path << "' has " << size
                                   << " bytes; an official batch has exactly 30730000 (10000 "
                                      "records of 3073 bytes): truncated, or not CIFAR-10 binary?");
    read_file_into(path, size, bytes, "CIFAR-10 file");
    append_records(path, bytes, d);
  }
  return d;
}

bool is_image_name(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

Image read_image(const std::string& path) {
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  ENGINE_CHECK(!ec, "cannot read image '" << path << "': " << ec.message());
  ENGINE_CHECK(size <= (64u << 20), "image '" << path << "' is " << size << " bytes; images above 64 MB are refused");
  std::vector<uint8_t> buf;
  read_file_into(path, size, buf, "image");
  return decode_image(buf.data(), buf.size(), path);
}

Image decode_image(const uint8_t* bytes, size_t size, const std::string& path) {
  ENGINE_CHECK(size <= (64u << 20), "image '" << path << "' is " << size << " bytes; images above 64 MB are refused");
  const auto reason = [] {
    const char* r = stbi_failure_reason();
    return r ? r : "unknown error";
  };
  check_before_stb(bytes, size, path);
  int w = 0, h = 0, comp = 0;
  // stb_image refuses a header over STBI_MAX_DIMENSIONS (kMaxImageSide) before allocating.
  unsigned char* px = stbi_load_from_memory(bytes, static_cast<int>(size), &w, &h, &comp, Dataset::kC);
  if (!px) ENGINE_FAIL("cannot decode image '" << path << "': " << reason() << " (PNG or JPEG up to 1024x1024 are read)");
  Image img{w, h, std::vector<uint8_t>(px, px + static_cast<size_t>(w) * h * Dataset::kC)};
  stbi_image_free(px);
  return img;
}

std::vector<uint8_t> resize_bilinear(const Image& img, int out_w, int out_h) {
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * out_h * Dataset::kC);
  const double sx = static_cast<double>(img.width) / out_w, sy = static_cast<double>(img.height) / out_h;
  for (int y = 0; y < out_h; ++y) {
    // Half-pixel centres: output pixel y samples the input at (y + 0.5) * scale - 0.5.
    const double fy = std::clamp((y + 0.5) * sy - 0.5, 0.0, img.height - 1.0);
    const int y0 = static_cast<int>(fy), y1 = std::min(y0 + 1, img.height - 1);
    const double wy = fy - y0;
    for (int x = 0; x < out_w; ++x) {
      const double fx = std::clamp((x + 0.5) * sx - 0.5, 0.0, img.width - 1.0);
      const int x0 = static_cast<int>(fx), x1 = std::min(x0 + 1, img.width - 1);
      const double wx = fx - x0;
      for (int c = 0; c < Dataset::kC; ++c) {
        auto at = [&](int yy, int xx) { return static_cast<double>(img.rgb[(static_cast<size_t>(yy) * img.width + xx) * Dataset::kC + c]); };
        const double v = (1 - wy) * ((1 - wx) * at(y0, x0) + wx * at(y0, x1)) + wy * ((1 - wx) * at(y1, x0) + wx * at(y1, x1));
        out[(static_cast<size_t>(y) * out_w + x) * Dataset::kC + c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0, 255.0)));
      }
    }
  }
  return out;
}

Dataset read_image_folder(const std::string& split_dir, bool verbose) {
  return decode_images(list_image_folder(split_dir), verbose, split_dir);
}

CifarLocation find_cifar10(const std::string& root) {
  std::error_code ec;
  const fs::path r(root);
  for (const fs::path& dir : {r, r / "cifar-10-batches-bin"}) {
    bool any = fs::exists(dir / kBinaryTestFile, ec);
    for (const char* f : kBinaryTrainFiles) any = any || fs::exists(dir / f, ec);
    if (any) return {CifarLocation::Kind::kBinary, dir.string()};  // missing ones are named later
  }
  for (const fs::path& dir : {r, r / "cifar10-jpeg"}) {
    if (fs::is_directory(dir / "train", ec) || fs::is_directory(dir / "test", ec))
      return {CifarLocation::Kind::kImageFolders, dir.string()};
  }
  return {};
}

CifarSplits load_cifar10(const std::string& root, const std::string& cache_dir, bool verbose) {
  const auto t0 = Clock::now();
  const CifarLocation loc = find_cifar10(root);
  ENGINE_CHECK(loc.kind != CifarLocation::Kind::kNone,
               "no CIFAR-10 found in '" << root << "': looked for data_batch_1..5.bin + "
                                        "test_batch.bin in it and in its cifar-10-batches-bin/, and "
                                        "for train/ + test/ class folders in it and in its "
                                        "cifar10-jpeg/ (data/get_cifar10.sh downloads or unpacks one)");
  CifarSplits s;
  const fs::path dir(loc.dir);
  if (loc.kind == CifarLocation::Kind::kBinary) {
    std::vector<std::string> train_files;
    for (const char* f : kBinaryTrainFiles) train_files.push_back((dir / f).string());
    s.train = read_cifar_binary(train_files);
    s.test = read_cifar_binary({(dir / kBinaryTestFile).string()});
    s.source = "CIFAR-10 binary batches in " + loc.dir;
  } else {
    const std::string train_dir = (dir / "train").string(), test_dir = (dir / "test").string();
    const auto train_files = list_image_folder(train_dir);
    const auto test_files = list_image_folder(test_dir);
    const uint64_t fingerprint = folder_fingerprint(train_files, test_files);
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(dir, ec);
    if (ec) canonical = fs::absolute(dir, ec);
    Hasher name_hash;
    name_hash.str(canonical.string());
    const fs::path cache_path =
        cache_dir.empty() ? fs::path() : fs::path(cache_dir) / ("cifar10-" + hex64(name_hash.digest()) + ".u8");
    std::string why = "no cache folder given";
    if (!cache_path.empty() && read_cache(cache_path, fingerprint, s, why)) {
      s.source = "CIFAR-10 image folders in " + loc.dir + " (from cache " + cache_path.string() + ")";
    } else {
      if (verbose)
        std::fprintf(stderr, "[data] decoding CIFAR-10 images in %s (%s)\n", loc.dir.c_str(), why.c_str());
      s.train = decode_images(train_files, verbose, "train");
      s.test = decode_images(test_files, verbose, "test");
      s.source = "CIFAR-10 image folders in " + loc.dir + " (decoded)";
      if (!cache_path.empty()) write_cache(cache_path, fingerprint, s, verbose);
    }
  }
  if (verbose)
    std::fprintf(stderr, "[data] %lld train + %lld test images from %s in %.2f s\n",
                 static_cast<long long>(s.train.size()), static_cast<long long>(s.test.size()),
                 s.source.c_str(), seconds_since(t0));
  return s;
}

CifarSplits synthetic_cifar(int64_t n_train, int64_t n_test, uint64_t seed) {
  ENGINE_CHECK(n_train >= 0 && n_test >= 0,
               "synthetic_cifar: sizes must not be negative (got " << n_train << ", " << n_test << ")");
  CifarSplits s;
  s.train = synthetic_split(n_train, seed, 1);
  s.test = synthetic_split(n_test, seed, 2);
  s.source = "synthetic CIFAR-10 stand-in (10 pattern classes, seed " + std::to_string(seed) + ")";
  return s;
}

Dataset subset(const Dataset& d, int64_t n) {
  ENGINE_CHECK(n >= 0, "subset: n must not be negative (got " << n << ")");
  n = std::min(n, d.size());
  std::vector<std::vector<int64_t>> by_class(Dataset::kClasses);
  for (int64_t i = 0; i < d.size(); ++i) {
    const int32_t l = d.labels[i];
    ENGINE_CHECK(l >= 0 && l < Dataset::kClasses, "subset: image " << i << " has label " << l);
    by_class[l].push_back(i);
  }
  std::vector<int64_t> order;
  order.reserve(n);
  for (size_t round = 0; static_cast<int64_t>(order.size()) < n; ++round)
    for (const auto& cls : by_class)
      if (round < cls.size() && static_cast<int64_t>(order.size()) < n) order.push_back(cls[round]);
  Dataset out;
  out.labels.resize(n);
  out.images.resize(n * Dataset::kImageBytes);
  for (int64_t k = 0; k < n; ++k) {
    out.labels[k] = d.labels[order[k]];
    std::memcpy(out.images.data() + k * Dataset::kImageBytes, d.image(order[k]), Dataset::kImageBytes);
  }
  return out;
}

}  // namespace data

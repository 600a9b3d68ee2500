// Checkpoints: named tensors plus string metadata in one file with a magic, a version, a
// length and a checksum; written to a temporary file, flushed and renamed, so an
// interrupted write never leaves a bad checkpoint behind.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "engine/tensor.h"

namespace engine {

struct StateDict {
  std::map<std::string, Tensor> tensors;      // CPU copies
  std::map<std::string, std::string> meta;    // configuration, counters, RNG state

  void put(const std::string& name, const Tensor& t);  // stores a CPU copy
  const Tensor& tensor(const std::string& name) const;  // error naming `name` when absent
  const std::string& get(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_double(const std::string& key) const;   // stored with full precision (hex float)
  void set_int(const std::string& key, int64_t v) { meta[key] = std::to_string(v); }
  void set_double(const std::string& key, double v);
};

void save_checkpoint(const std::string& path, const StateDict& state);
// Writes `bytes` to path.tmp, flushes it and renames it over `path`: readers see the old file
// or the whole new one, never half of it. `what` names the file in errors ("checkpoint").
void write_file_atomically(const std::string& path, const std::string& bytes, const char* what);
// Refuses (engine::Error naming the file and what is wrong) a missing, truncated, altered
// or foreign file.
StateDict load_checkpoint(const std::string& path);
// The same checks on a checkpoint's bytes already in memory; `path` names it in errors.
StateDict parse_checkpoint(const std::string& bytes, const std::string& path);

// Copies a saved tensor into `dst` (any device), checking shape and dtype.
void load_into(Tensor& dst, const StateDict& state, const std::string& name);

// FNV-1a, 64 bits: the hash h carried over n more bytes. From kFnv1aBasis it is the standard
// hash; the checkpoint's checksum and the replicas' model checksum (distributed.cpp) use it.
inline constexpr uint64_t kFnv1aBasis = 14695981039346656037ull;
uint64_t fnv1a(uint64_t h, const void* data, size_t n);

}  // namespace engine

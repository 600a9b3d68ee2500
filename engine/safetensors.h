// The safetensors file format (what PyTorch, Hugging Face and most tools read), written and
// read here without a library: u64 little-endian header length, a JSON header of
// {name: {dtype, shape, data_offsets}} plus optional "__metadata__" strings, then raw bytes.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace engine {

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;  // CPU tensors, in the order of their data
  std::map<std::string, std::string> metadata;          // the "__metadata__" strings

  const Tensor* find(const std::string& name) const;    // nullptr when absent
};

// Writes the tensors (any device; copied to the host) in the order given, the header padded
// with spaces so the data starts 8-byte aligned. Atomic: a failed write leaves no file.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Refuses, with one engine::Error naming the file and the fault, anything the format does not
// allow: a short file, a header length beyond the file, a header that is not a JSON object of
// well-formed entries, an unknown dtype, a duplicated name, offsets that disagree with the
// shape, fall outside the data, overlap, or leave bytes unindexed.
SafetensorsFile load_safetensors(const std::string& path);
// The same checks on a file's bytes already in memory; `path` names it in errors.
SafetensorsFile parse_safetensors(const std::string& bytes, const std::string& path);

// "F32", "F16", ... as the format spells them; the reverse fails for dtypes we do not hold.
const char* safetensors_dtype_name(DType t);

}  // namespace engine

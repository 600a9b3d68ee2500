// safetensors reader and writer, with the small JSON subset its header needs (objects,
// arrays, strings, non-negative integers) parsed strictly.
#include "engine/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "engine/checkpoint.h"

namespace engine {

namespace {

// The reference implementation refuses headers above 100,000,000 bytes; so do we.
constexpr uint64_t kMaxHeaderBytes = 100000000;

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {{DType::F64, "F64"}, {DType::F32, "F32"}, {DType::F16, "F16"},
                                     {DType::BF16, "BF16"}, {DType::I64, "I64"}, {DType::I32, "I32"},
                                     {DType::U8, "U8"}, {DType::I8, "I8"}};

// ---- JSON: just what a safetensors header holds ---------------------------------------------
struct Json {
  enum class Kind { Object, Array, String, Integer } kind = Kind::Integer;
  std::vector<std::pair<std::string, Json>> members;  // Object, in file order
  std::vector<Json> items;                            // Array
  std::string text;                                   // String
  int64_t integer = 0;                                // Integer
};

class JsonParser {
 public:
  JsonParser(const std::string& s, const std::string& path) : s_(s), path_(path) {}

  Json document() {
    Json v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the JSON object");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    ENGINE_FAIL(path_ << " is not a valid safetensors file: header " << what << " (at byte " << pos_ << ")");
  }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  char peek() {
    skip_space();
    if (pos_ >= s_.size()) fail("ends early");
    return s_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  Json value(int depth) {
    if (depth > 4) fail("nests deeper than a safetensors header does");
    const char c = peek();
    Json v;
    if (c == '{') {
      v.kind = Json::Kind::Object;
      ++pos_;
      if (peek() == '}') {
        ++pos_;
        return v;
      }
      std::set<std::string> keys;
      for (;;) {
        if (peek() != '"') fail("expected a quoted name");
        std::string key = string();
        expect(':');
        if (!keys.insert(key).second) fail("repeats the name '" + key + "'");
        v.members.emplace_back(std::move(key), value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Kind::Array;
      ++pos_;
      if (peek() == ']') {
        ++pos_;
        return v;
      }
      for (;;) {
        v.items.push_back(value(depth + 1));
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::Kind::String;
      v.text = string();
      return v;
    }
    if (c >= '0' && c <= '9') {
      v.kind = Json::Kind::Integer;
      if (c == '0' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9') fail("has a number with a leading zero");
      uint64_t x = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        const uint64_t digit = static_cast<uint64_t>(s_[pos_] - '0');
        if (x > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - digit) / 10) fail("has an integer too large");
        x = x * 10 + digit;
        ++pos_;
      }
      if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) fail("has a non-integer number");
      v.integer = static_cast<int64_t>(x);
      return v;
    }
    fail(c == '-' ? "has a negative number" : "has a value that is not an object, array, string or integer");
  }

  // A JSON string; \uXXXX escapes become UTF-8 (surrogate pairs included).
  std::string string() {
    ++pos_;  // the opening quote
    std::string out;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("has a control character inside a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) break;
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp < 0xE000) fail("has a lone surrogate");
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') fail("has a lone surrogate");
            pos_ += 2;
            const uint32_t lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("has a lone surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: fail("has an unknown escape in a string");
      }
    }
    fail("has an unterminated string");
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("has a short \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<uint32_t>(h - 'A' + 10);
      else fail("has a bad \\u escape");
    }
    return v;
  }

  const std::string& s_;
  const std::string& path_;
  size_t pos_ = 0;
};

void put_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypeNames)
    if (d.dtype == t) return d.name;
  ENGINE_FAIL("safetensors has no name for dtype " << dtype_name(t));
}

const Tensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : metadata) {
      if (header.back() != '{') header += ',';
      put_json_string(header, k);
      header += ':';
      put_json_string(header, v);
    }
    header += '}';
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ENGINE_CHECK(name != "__metadata__" && names.insert(name).second,
                 "cannot write " << path << ": the tensor name '" << name << "' is reserved or repeated");
    if (header.size() > 1) header += ',';
    put_json_string(header, name);
    header += ":{\"dtype\":\"";
    header += safetensors_dtype_name(t.dtype());
    header += "\",\"shape\":[";
    for (int i = 0; i < t.ndim(); ++i) header += (i ? "," : "") + std::to_string(t.shape()[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.nbytes()) + "]}";
    offset += t.nbytes();
  }
  header += '}';
  header.append((8 - header.size() % 8) % 8, ' ');  // data 8-byte aligned, as the format recommends

  std::string file;
  file.reserve(8 + header.size() + offset);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file += static_cast<char>((n >> (8 * i)) & 0xFF);  // little-endian
  file += header;
  for (const auto& [name, t] : tensors) {
    const Tensor host = t.device().is_cpu() ? t : t.to_cpu();
    file.append(static_cast<const char*>(host.raw()), host.nbytes());
  }
  write_file_atomically(path, file, "safetensors file");
}

SafetensorsFile load_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ENGINE_CHECK(in, "cannot open " << path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_safetensors(ss.str(), path);
}

SafetensorsFile parse_safetensors(const std::string& file, const std::string& path) {
  const std::string bad = path + " is not a valid safetensors file: ";
  ENGINE_CHECK(file.size() >= 8, bad << "it is " << file.size() << " bytes, shorter than the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(file[i]);
  ENGINE_CHECK(header_len <= kMaxHeaderBytes, bad << "header length " << header_len << " is above the format's limit of 100,000,000 bytes");
  ENGINE_CHECK(header_len <= file.size() - 8,
               bad << "header length " << header_len << " runs past the end of the file (" << file.size() << " bytes)");
  ENGINE_CHECK(header_len >= 2 && file[8] == '{', bad << "the header does not start with '{'");
  const std::string header = file.substr(8, header_len);
  const uint64_t data_bytes = file.size() - 8 - header_len;
  const char* data = file.data() + 8 + header_len;

  const Json doc = JsonParser(header, path).document();
  ENGINE_CHECK(doc.kind == Json::Kind::Object, bad << "the header is not a JSON object");
  SafetensorsFile out;
  struct Placed {
    uint64_t begin, end;
    std::string name;
    Tensor tensor;
  };
  std::vector<Placed> placed;
  for (const auto& [name, entry] : doc.members) {
    if (name == "__metadata__") {
      ENGINE_CHECK(entry.kind == Json::Kind::Object, bad << "__metadata__ is not an object");
      for (const auto& [k, v] : entry.members) {
        ENGINE_CHECK(v.kind == Json::Kind::String, bad << "__metadata__ entry '" << k << "' is not a string");
        out.metadata[k] = v.text;
      }
      continue;
    }
    const std::string what = bad + "tensor '" + name + "' ";
    ENGINE_CHECK(entry.kind == Json::Kind::Object, what << "is not an object");
    const Json *dtype = nullptr, *shape = nullptr, *offsets = nullptr;
    for (const auto& [k, v] : entry.members) {
      if (k == "dtype") dtype = &v;
      else if (k == "shape") shape = &v;
      else if (k == "data_offsets") offsets = &v;
      else ENGINE_FAIL(what << "has an unknown field '" << k << "'");
    }
    ENGINE_CHECK(dtype && shape && offsets, what << "lacks dtype, shape or data_offsets");
    ENGINE_CHECK(dtype->kind == Json::Kind::String, what << "has a dtype that is not a string");
    const DTypeName* dt = nullptr;
    for (const auto& d : kDTypeNames)
      if (dtype->text == d.name) dt = &d;
    ENGINE_CHECK(dt, what << "has dtype '" << dtype->text << "', which this engine does not read (F64, F32, F16, BF16, I64, I32, U8, I8)");
    ENGINE_CHECK(shape->kind == Json::Kind::Array && shape->items.size() <= 8, what << "has a shape that is not a list of up to 8 sizes");
    Shape dims;
    uint64_t numel = 1;
    for (const Json& d : shape->items) {
      ENGINE_CHECK(d.kind == Json::Kind::Integer, what << "has a shape entry that is not an integer");
      dims.push_back(d.integer);
      ENGINE_CHECK(d.integer == 0 || numel <= data_bytes / static_cast<uint64_t>(d.integer),
                   what << "has shape " << shape_str(dims) << ", larger than the file's data");
      numel *= static_cast<uint64_t>(d.integer);
    }
    ENGINE_CHECK(offsets->kind == Json::Kind::Array && offsets->items.size() == 2 &&
                     offsets->items[0].kind == Json::Kind::Integer && offsets->items[1].kind == Json::Kind::Integer,
                 what << "has data_offsets that are not two integers");
    const uint64_t begin = static_cast<uint64_t>(offsets->items[0].integer);
    const uint64_t end = static_cast<uint64_t>(offsets->items[1].integer);
    ENGINE_CHECK(begin <= end && end <= data_bytes,
                 what << "has data_offsets [" << begin << ", " << end << "] outside the " << data_bytes << " data bytes");
    ENGINE_CHECK(end - begin == numel * dtype_size(dt->dtype),
                 what << "has " << end - begin << " bytes for shape " << shape_str(dims) << " of " << dt->name
                      << " (" << numel * dtype_size(dt->dtype) << " expected)");
    placed.push_back({begin, end, name, Tensor::empty(dims, dt->dtype)});
  }
  // The format requires the tensors to tile the data exactly: no overlap, no holes.
  std::sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t covered = 0;
  for (const Placed& p : placed) {
    ENGINE_CHECK(p.begin >= covered, bad << "tensor '" << p.name << "' overlaps the tensor before it in the data");
    ENGINE_CHECK(p.begin == covered, bad << "bytes " << covered << " to " << p.begin << " of the data belong to no tensor");
    covered = p.end;
  }
  ENGINE_CHECK(covered == data_bytes, bad << "bytes " << covered << " to " << data_bytes << " of the data belong to no tensor");
  for (Placed& p : placed) {
    if (p.end > p.begin) std::memcpy(p.tensor.raw(), data + p.begin, p.end - p.begin);
    out.tensors.emplace_back(std::move(p.name), std::move(p.tensor));
  }
  return out;
}

}  // namespace engine

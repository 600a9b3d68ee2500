// Checkpoint file format (little-endian):
//   "MPCNNCKP" | u32 version | u64 payload bytes | payload | u64 FNV-1a-64 of the payload
//   payload: u32 n_meta, n_meta x (str key, str value), u32 n_tensors,
//            n_tensors x (str name, u8 dtype, u8 ndim, ndim x i64 dim, u64 nbytes, bytes)
//   str: u32 length + bytes
#include "engine/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace engine {

namespace {

constexpr char kMagic[8] = {'M', 'P', 'C', 'N', 'N', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;

// The checksum starts from FNV's basis with its last digit lost (1469598103934665603, not
// ...6037): every checkpoint written so far carries it, so it stays.
uint64_t checkpoint_checksum(const std::string& payload) {
  return fnv1a(1469598103934665603ull, payload.data(), payload.size());
}

template <class V> void put_pod(std::string& out, V v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put_str(std::string& out, const std::string& s) {
  put_pod<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out += s;
}

// Bounds-checked reader over the payload; any overrun means a corrupt file.
struct Reader {
  const std::string& buf;
  size_t pos;
  const std::string& path;
  void need(size_t n) const {
    ENGINE_CHECK(n <= buf.size() - pos, "checkpoint " << path << " is corrupt (record runs past the end)");
  }
  template <class V> V pod() {
    need(sizeof(V));
    V v;
    std::memcpy(&v, buf.data() + pos, sizeof v);
    pos += sizeof v;
    return v;
  }
  std::string str() {
    const uint32_t n = pod<uint32_t>();
    need(n);
    std::string s = buf.substr(pos, n);
    pos += n;
    return s;
  }
};

}  // namespace

void StateDict::put(const std::string& name, const Tensor& t) { tensors[name] = t.device().is_cpu() ? t.clone() : t.to_cpu(); }

const Tensor& StateDict::tensor(const std::string& name) const {
  auto it = tensors.find(name);
  ENGINE_CHECK(it != tensors.end(), "checkpoint has no tensor '" << name << "'");
  return it->second;
}

const std::string& StateDict::get(const std::string& key) const {
  auto it = meta.find(key);
  ENGINE_CHECK(it != meta.end(), "checkpoint has no entry '" << key << "'");
  return it->second;
}

int64_t StateDict::get_int(const std::string& key) const {
  const std::string& v = get(key);
  try {
    size_t used = 0;
    const long long x = std::stoll(v, &used);
    if (used == v.size()) return x;
  } catch (const std::exception&) {
  }
  ENGINE_FAIL("checkpoint entry '" << key << "' is not an integer: '" << v << "'");
}

void StateDict::set_double(const std::string& key, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);  // hex float: round-trips exactly
  meta[key] = buf;
}

double StateDict::get_double(const std::string& key) const {
  const std::string& v = get(key);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  ENGINE_CHECK(end && *end == '\0' && !v.empty(), "checkpoint entry '" << key << "' is not a number: '" << v << "'");
  return x;
}

void save_checkpoint(const std::string& path, const StateDict& state) {
  std::string payload;
  put_pod<uint32_t>(payload, static_cast<uint32_t>(state.meta.size()));
  for (const auto& [k, v] : state.meta) {
    put_str(payload, k);
    put_str(payload, v);
  }
  put_pod<uint32_t>(payload, static_cast<uint32_t>(state.tensors.size()));
  for (const auto& [name, t] : state.tensors) {
    put_str(payload, name);
    put_pod<uint8_t>(payload, static_cast<uint8_t>(t.dtype()));
    put_pod<uint8_t>(payload, static_cast<uint8_t>(t.ndim()));
    for (int64_t d : t.shape()) put_pod<int64_t>(payload, d);
    put_pod<uint64_t>(payload, t.nbytes());
    const Tensor host = t.device().is_cpu() ? t : t.to_cpu();
    payload.append(static_cast<const char*>(host.raw()), host.nbytes());
  }
  std::string file(kMagic, sizeof kMagic);
  put_pod<uint32_t>(file, kVersion);
  put_pod<uint64_t>(file, payload.size());
  file += payload;
  put_pod<uint64_t>(file, checkpoint_checksum(payload));

  write_file_atomically(path, file, "checkpoint");
}

void write_file_atomically(const std::string& path, const std::string& bytes, const char* what) {
  const std::string tmp = path + ".tmp";
  // Every failure says whether an earlier file at `path` is still there: it is never touched
  // before the rename, so a full disk or a second signal leaves it whole.
  const auto fail = [&](const char* doing, int err) {
    ::unlink(tmp.c_str());
    const bool previous = ::access(path.c_str(), F_OK) == 0;
    ENGINE_FAIL("cannot " << doing << " " << what << " " << tmp << ": " << std::strerror(err) << "; "
                          << (previous ? "the previous " + std::string(what) + " " + path + " is unchanged"
                                       : std::string("nothing was written to ") + path));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("write", errno);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      fail("write", err);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fail("flush", err);
  }
  if (::close(fd) != 0) fail("close", errno);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename into place", errno);
  // The rename itself is durable once the folder is flushed too.
  const std::string::size_type slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

StateDict load_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ENGINE_CHECK(in, "cannot open checkpoint " << path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_checkpoint(ss.str(), path);
}

StateDict parse_checkpoint(const std::string& file, const std::string& path) {
  const size_t header = sizeof kMagic + sizeof(uint32_t) + sizeof(uint64_t);
  ENGINE_CHECK(file.size() >= header + sizeof(uint64_t) && std::memcmp(file.data(), kMagic, sizeof kMagic) == 0,
               "checkpoint " << path << " is not a checkpoint of this engine (bad magic or too short)");
  uint32_t version;
  uint64_t payload_size;
  std::memcpy(&version, file.data() + sizeof kMagic, sizeof version);
  std::memcpy(&payload_size, file.data() + sizeof kMagic + sizeof version, sizeof payload_size);
  ENGINE_CHECK(version == kVersion, "checkpoint " << path << " has version " << version << ", this engine reads " << kVersion);
  ENGINE_CHECK(file.size() == header + payload_size + sizeof(uint64_t),
               "checkpoint " << path << " is truncated or padded: " << file.size() << " bytes, expected "
                             << header + payload_size + sizeof(uint64_t));
  const std::string payload = file.substr(header, payload_size);
  uint64_t stored;
  std::memcpy(&stored, file.data() + header + payload_size, sizeof stored);
  ENGINE_CHECK(stored == checkpoint_checksum(payload), "checkpoint " << path << " is corrupt (checksum mismatch)");

  StateDict state;
  Reader r{payload, 0, path};
  const uint32_t n_meta = r.pod<uint32_t>();
  for (uint32_t i = 0; i < n_meta; ++i) {
    std::string k = r.str();
    state.meta[k] = r.str();
  }
  const uint32_t n_tensors = r.pod<uint32_t>();
  for (uint32_t i = 0; i < n_tensors; ++i) {
    const std::string name = r.str();
    const uint8_t dt = r.pod<uint8_t>(), ndim = r.pod<uint8_t>();
    ENGINE_CHECK(dt <= static_cast<uint8_t>(DType::I64) && ndim <= 8, "checkpoint " << path << " is corrupt (tensor " << name << ")");
    Shape shape(ndim);
    for (auto& d : shape) d = r.pod<int64_t>();
    const uint64_t nbytes = r.pod<uint64_t>();
    for (int64_t d : shape) ENGINE_CHECK(d >= 0, "checkpoint " << path << " is corrupt (tensor " << name << ")");
    ENGINE_CHECK(nbytes == static_cast<uint64_t>(shape_numel(shape)) * dtype_size(static_cast<DType>(dt)),
                 "checkpoint " << path << " is corrupt (tensor " << name << " size)");
    r.need(nbytes);
    Tensor t = Tensor::empty(shape, static_cast<DType>(dt));
    if (nbytes) std::memcpy(t.raw(), payload.data() + r.pos, nbytes);
    r.pos += nbytes;
    state.tensors[name] = t;
  }
  ENGINE_CHECK(r.pos == payload.size(), "checkpoint " << path << " is corrupt (trailing bytes)");
  return state;
}

void load_into(Tensor& dst, const StateDict& state, const std::string& name) {
  const Tensor& src = state.tensor(name);
  ENGINE_CHECK(src.shape() == dst.shape() && src.dtype() == dst.dtype(),
               "checkpoint tensor '" << name << "' is " << src.desc() << ", the model expects " << dst.desc());
  dst.copy_from(src);
}

uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace engine

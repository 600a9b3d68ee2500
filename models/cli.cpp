// The value parsers the command-line tools share, and the check of the environment switches
// (models/cli.h).
#include "models/cli.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/int8_gemm.h"

namespace models {

namespace {

[[noreturn]] void usage_error(const std::string& msg) { throw UsageError(msg); }

// strtoll and strtod skip leading white space; a flag's value must be the number alone.
bool starts_with_space(const std::string& v) { return !v.empty() && std::isspace(static_cast<unsigned char>(v[0])); }

std::string number_str(double x) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", x);  // "0", not std::to_string's "0.000000"
  return s;
}

}  // namespace

int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || starts_with_space(v) || *end || errno == ERANGE || x < lo || x > hi) {
    const std::string range = hi == INT64_MAX ? ">= " + std::to_string(lo)
                                              : "from " + std::to_string(lo) + " to " + std::to_string(hi);
    usage_error(flag + " expects an integer " + range + ", got '" + v + "'");
  }
  return x;
}

double parse_number(const std::string& flag, const std::string& v, double lo, bool lo_open) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || starts_with_space(v) || *end || !std::isfinite(x) || x < lo || (lo_open && x == lo))
    usage_error(flag + " expects a number " + (lo_open ? "> " : ">= ") + number_str(lo) + ", got '" + v + "'");
  return x;
}

std::string parse_choice(const std::string& flag, const std::string& v, const std::vector<std::string>& allowed) {
  std::string all;
  for (const std::string& a : allowed) {
    if (v == a) return v;
    all += (all.empty() ? "" : ", ") + a;
  }
  usage_error(flag + " must be one of " + all + ", got '" + v + "'");
}

std::vector<std::string> parse_list(const std::string& flag, const std::string& v) {
  std::vector<std::string> out;
  size_t from = 0;
  while (true) {
    const size_t comma = v.find(',', from);
    out.push_back(v.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
    if (out.back().empty()) usage_error(flag + " expects a comma-separated list without empty items, got '" + v + "'");
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

int64_t parse_bytes(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  const std::string unit = end ? end : "";
  const double mult = unit == "GiB" ? 1024.0 * 1024 * 1024 : unit == "MiB" ? 1024.0 * 1024 : unit == "KiB" ? 1024.0
                      : unit == "GB" ? 1e9 : unit.empty() ? 1.0 : -1;
  const double bytes = x * mult;
  // The comparisons are false for NaN, so it is refused with the rest.
  if (end == v.c_str() || starts_with_space(v) || mult < 0 || !(bytes >= 1) || !(bytes < 4.611686018427388e18))
    usage_error(flag + " expects a size like 80GiB, 512MiB or 8e10 (at least 1 byte, below 2^62), got '" + v + "'");
  return static_cast<int64_t>(bytes);
}

std::string environment_error() {
  // The ISA cap first: the INT8 path's check reads the ISA, which would end the process itself.
  std::string why = kernels::cpu::cpu_isa_env_error();
  if (why.empty()) why = kernels::cpu::int8::int8_path_env_error();
  const char* log = kernels::cpu::env_switch("ENGINE_CUDNN_LOG");
  if (why.empty() && log && std::string(log) != "0" && std::string(log) != "1")
    why = std::string("ENGINE_CUDNN_LOG must be 0 or 1; got '") + log + "'";
  return why;
}

int report_environment_error() {
  const std::string why = environment_error();
  if (why.empty()) return 0;
  std::fprintf(stderr, "error: %s\n", why.c_str());
  return 2;
}

}  // namespace models

// What the command-line tools (trainer, predict, bench_train) do with a failure: one `error:`
// line on stderr and exit code 1, never an uncaught exception; a bad command line: one line
// naming the flag, a pointer to --help, and exit code 2; a bad environment switch: one line and
// exit code 2. The value parsers all three share (models/cli.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/error.h"

namespace models {

// A bad command line (the parsers throw it; they never exit, so they can be fuzzed).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --threads above this is a typo, not a machine (and would not fit OpenMP's int).
constexpr int64_t kMaxThreads = 4096;

// The values of flags, strictly: the whole string must parse, within the bounds; each throws
// UsageError naming the flag and the value otherwise.
int64_t parse_int(const std::string& flag, const std::string& v, int64_t lo, int64_t hi = INT64_MAX);
// A finite number >= lo (> lo when lo_open).
double parse_number(const std::string& flag, const std::string& v, double lo, bool lo_open);
std::string parse_choice(const std::string& flag, const std::string& v, const std::vector<std::string>& allowed);
// A comma-separated list of at least one item, none empty ("a,b"; not "", ",", "a,,b").
std::vector<std::string> parse_list(const std::string& flag, const std::string& v);
// A size in bytes: a number with an optional unit, GiB, MiB, KiB or GB (80GiB, 512MiB, 8e10),
// finite, at least one byte and below 2^62 (room to add and multiply in int64).
int64_t parse_bytes(const std::string& flag, const std::string& v);

// Why an environment switch the engine reads (kernels/cpu/cpu_isa.h: ENGINE_CPU_ISA,
// ENGINE_INT8_PATH, ENGINE_CUDNN_LOG) is refused, "" when all are fine. Each tool checks at
// start, so even a run that would never read a switch refuses a bad one.
std::string environment_error();
// The check above as a tool does it: "error: <why>" on stderr and 2, or 0 when fine.
int report_environment_error();

// What a command line asks for besides a run.
enum class ArgsAction { Run, Help, Version };

// "tool: message" and the --help pointer on stderr; returns the exit code, 2.
inline int report_usage_error(const char* tool, const UsageError& e) {
  std::fprintf(stderr, "%s: %s\nTry '%s --help' for the options.\n", tool, e.what(), tool);
  return 2;
}

// `report` gets the message (the trainer's ends the whole data-parallel job with it).
template <class Body, class Report> int run_reporting_errors(Body&& body, Report&& report) {
  try {
    return body();
  } catch (const engine::Error& e) {
    report(e.message());
  } catch (const std::bad_alloc&) {
    report("out of host memory");
  } catch (const std::exception& e) {
    report(e.what());
  }
  return 1;
}

template <class Body> int run_reporting_errors(Body&& body) {
  return run_reporting_errors(body, [](const std::string& m) { std::fprintf(stderr, "error: %s\n", m.c_str()); });
}

}  // namespace models

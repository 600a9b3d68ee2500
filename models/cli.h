// What the command-line tools (trainer, predict) do with a failure: one `error:` line on
// stderr and exit code 1, never an uncaught exception; a bad command line: one line naming
// the flag, a pointer to --help, and exit code 2.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "engine/error.h"

namespace models {

// A bad command line (the parsers throw it; they never exit, so they can be fuzzed).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --threads above this is a typo, not a machine (and would not fit OpenMP's int).
constexpr int64_t kMaxThreads = 4096;

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

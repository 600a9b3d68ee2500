// What the command-line tools (trainer, predict) do with a failure: one `error:` line on
// stderr and exit code 1, never an uncaught exception.
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <string>

#include "engine/error.h"

namespace models {

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

// What the command-line tools (trainer, predict) do with a failure: one `error:` line on
// stderr and exit code 1, never an uncaught exception.
#pragma once

#include <cstdio>
#include <exception>
#include <new>

#include "engine/error.h"

namespace models {

template <class Body> int run_reporting_errors(Body&& body) {
  try {
    return body();
  } catch (const engine::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of host memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}

}  // namespace models

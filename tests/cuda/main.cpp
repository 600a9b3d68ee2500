// Main for the [cuda] tests: exits 77 (CTest's "skipped") with the reason when no CUDA
// device is present, so GPU tests never pass silently on a machine without one.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <string>

#include "catch2/catch.hpp"
#include "engine/device.h"

int main(int argc, char** argv) {
  std::string why;
  if (engine::cuda_device_count(&why) == 0) {
    std::printf("SKIPPED: [cuda] tests need a CUDA device: %s\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}

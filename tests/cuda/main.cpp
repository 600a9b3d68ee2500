// Main for the [cuda] tests: exits 77 (CTest's "skipped") with the reason when no CUDA
// device is present, so GPU tests never pass silently on a machine without one. Listing the
// tests (--list-tests, --list-tags, -l, ...) works without a device. It prints the CUDA,
// cuBLASLt and cuDNN versions it loaded (against those it was built with) first, and runs
// with deterministic cuDNN algorithms (the trainer's --deterministic), so reruns repeat. At the
// end it destroys the one-rank NCCL communicator a test made, before static destructors run:
// NCCL's proxy thread must not outlive the CUDA context it works in.
#define CATCH_CONFIG_RUNNER
#include <cstdio>
#include <cstring>
#include <string>

#include "catch2/catch.hpp"
#include "engine/device.h"
#include "engine/distributed.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strcmp(argv[i], "-l") == 0 || std::strcmp(argv[i], "-t") == 0)
      listing = true;
  std::string why;
  if (!listing && engine::cuda_device_count(&why) == 0) {
    std::printf("SKIPPED: [cuda] tests need a CUDA device: %s\n", why.c_str());
    return 77;
  }
  if (!listing) std::printf("%s", engine::cuda_library_versions().c_str());
  engine::set_cuda_deterministic(true);
  const int failed = Catch::Session().run(argc, argv);
  // After a failure the context may hold a sticky error, and ncclCommDestroy can then hang:
  // the totals are printed already, so leave the teardown to the process exit.
  if (failed == 0) engine::dist::finalize();
  return failed;
}

// One libFuzzer binary per target of targets.h: CMake compiles this file once per target
// with FUZZ_TARGET naming it (fuzz_checkpoint, fuzz_image, ...).
#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::FUZZ_TARGET(data, size);
  return 0;
}

// [cuda] the PyTorch golden fixtures, checked on the GPU: test_golden.cpp compiled a second
// time with its tensors on cuda:0 (FP32 only; FP64 runs on the CPU).
#define ENGINE_GOLDEN_ON_CUDA
#include "../test_golden.cpp"

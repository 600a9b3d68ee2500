// ENGINE_HD marks element math shared by the CPU reference and the CUDA kernels.
// Compiled by nvcc it is __host__ __device__; by a plain C++ compiler it is nothing.
#pragma once

#if defined(__CUDACC__)
#define ENGINE_HD __host__ __device__ __forceinline__
#else
#define ENGINE_HD inline
#endif

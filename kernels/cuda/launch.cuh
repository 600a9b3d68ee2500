// Internal helpers for the .cu files of kernels/cuda: grid sizing, alignment tests, packed
// 16-byte loads and stores, warp and block reductions. Not part of the public API.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/numeric.h"

namespace kernels::cuda::detail {

constexpr int kBlock = 256;

// Blocks for a grid-stride loop over `work` items: no more than needed, and at most enough
// to fill every SM (2048 resident threads each on Hopper) a single time; each thread then
// loops. Grid-stride loops make every kernel correct for any n, including n > 2^31.
inline unsigned grid_for(int64_t work, int block = kBlock) {
  const int64_t need = (work + block - 1) / block;
  const int64_t cap = static_cast<int64_t>(context().sm_count) * (2048 / block);
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(need, cap)));
}

// Row groups for the channel-tiled column reductions (batch-norm, bias gradients): enough
// blocks of (32 columns x 8 rows) to give every SM about four, never more than the rows
// allow, at most 1024 so the serial merge of partials stays short. Depends only on the
// shape and the device, so results are reproducible run to run.
inline int row_groups(int64_t rows, int64_t cols) {
  const int64_t col_tiles = (cols + 31) / 32;
  const int64_t target = static_cast<int64_t>(context().sm_count) * 4;
  int64_t g = (target + col_tiles - 1) / col_tiles;
  g = std::min<int64_t>(g, (rows + 7) / 8);
  g = std::min<int64_t>(g, 1024);
  return static_cast<int>(std::max<int64_t>(g, 1));
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// The largest power of two (up to 256) dividing p's address; 256 for null. Part of the
// cuBLASLt and cuDNN algorithm cache keys: a choice made for aligned buffers may not run on
// less aligned ones.
inline uint32_t pointer_alignment(const void* p) {
  if (!p) return 256;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 1;
  while (al < 256 && (a & (2 * al - 1)) == 0) al *= 2;
  return al;
}

// N elements of T moved as N*sizeof(T)/16 128-bit transactions (callers guarantee the
// alignment and that N*sizeof(T) is a multiple of 16).
template <class T, int N> union Pack {
  static_assert((sizeof(T) * N) % 16 == 0, "a pack is a whole number of 16-byte words");
  uint4 words[sizeof(T) * N / 16];
  T v[N];
};
template <class T, int N> __device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  Pack<T, N> r;
  const uint4* src = reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < int(sizeof(T) * N / 16); ++i) r.words[i] = src[i];
  return r;
}
template <class T, int N> __device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& r) {
  uint4* dst = reinterpret_cast<uint4*>(p);
#pragma unroll
  for (int i = 0; i < int(sizeof(T) * N / 16); ++i) dst[i] = r.words[i];
}

template <class A> __device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <class A> __device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const A u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}

// Sum over a 1-D block (blockDim.x a multiple of 32); the result is valid in thread 0.
// Uses `scratch` (32 entries of shared memory); callers __syncthreads() before reusing it.
template <class A> __device__ __forceinline__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? scratch[lane] : A(0);
    v = warp_sum(v);
  }
  return v;
}

}  // namespace kernels::cuda::detail

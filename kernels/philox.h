// Philox4x32-10, the counter-based generator of Salmon et al. (SC'11), as host/device code.
// Stateless: the same (seed, stream, index) gives the same number on the CPU and the GPU.
#pragma once

#include <cstdint>

#include "kernels/hd.h"

namespace kernels {

namespace philox_detail {
inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1

ENGINE_HD void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
#if defined(__CUDA_ARCH__)
  hi = __umulhi(a, b);
  lo = a * b;
#else
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
#endif
}
}  // namespace philox_detail

// The raw bijection: 10 rounds over a 128-bit counter under a 64-bit key.
// ctr and out may alias.
ENGINE_HD void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  using namespace philox_detail;
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {  // the key schedule advances between rounds, not before the first
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kMul0, c0, hi0, lo0);
    mulhilo(kMul1, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// Counter layout used by the engine:
//   key = { seed[31:0], seed[63:32] }
//   ctr = { block[31:0], block[63:32], stream[31:0], stream[63:32] }
// One call yields 4 words, so element `index` of a stream uses block = index / 4 and the
// word index % 4. Streams (one per dropout layer, augmentation, init, ...) never share a
// counter, so their numbers are independent without any state to carry.
ENGINE_HD void philox_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const uint32_t ctr[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                           static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  philox4x32_10(ctr, key, out);
}

// The 32 random bits for element `index` of `stream`.
ENGINE_HD uint32_t philox_u32(uint64_t seed, uint64_t stream, uint64_t index) {
  uint32_t out[4];
  philox_block(seed, stream, index >> 2, out);
  return out[index & 3u];
}

// A float in [0, 1) from the top 24 bits: every value is exact, and 1.0 is unreachable
// (rounding all 32 bits to float could give 1.0).
ENGINE_HD float uniform_from_u32(uint32_t x) {
  return static_cast<float>(x >> 8) * 5.9604644775390625e-08f;  // 2^-24
}

ENGINE_HD float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return uniform_from_u32(philox_u32(seed, stream, index));
}

}  // namespace kernels

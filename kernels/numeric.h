// FP16 and BF16 storage types and their exact conversions, written as bit manipulation so the
// CPU reference rounds exactly like the GPU. Header-only; compiles with g++ and with nvcc.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/hd.h"

#if defined(__F16C__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#define KERNELS_HOST_F16C 1
#endif

namespace kernels {

// ---- Type punning that works on host and device ----------------------------------------
// memcpy is the defined way on the host; on the device the intrinsics are free.

ENGINE_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ENGINE_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

ENGINE_HD uint64_t double_bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
#endif
}

ENGINE_HD double bits_double(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
#endif
}

// ---- FP32 <-> FP64 --------------------------------------------------------------------------
// Finite values and infinities convert exactly as the cast does (widening is exact, narrowing
// rounds to nearest even). A NaN follows the rule of the 16-bit conversions below: its sign and
// payload are kept (the top 23 payload bits when narrowing) and the quiet bit is set. x86's
// cvtss2sd/cvtsd2ss already do this; the GPU's cvt returns the canonical NaN 0x7fffffff
// whatever the input, so without the patch the two backends would differ in a NaN's bits.
ENGINE_HD double float_to_double(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) <= 0x7f800000u) return static_cast<double>(f);
  return bits_double((static_cast<uint64_t>(x & 0x80000000u) << 32) | 0x7ff8000000000000ull |
                     (static_cast<uint64_t>(x & 0x007fffffu) << 29));
}

ENGINE_HD float double_to_float(double d) {
  const uint64_t x = double_bits(d);
  if ((x & 0x7fffffffffffffffull) <= 0x7ff0000000000000ull) return static_cast<float>(d);
  return bits_float(static_cast<uint32_t>(x >> 32 & 0x80000000u) | 0x7fc00000u |
                    static_cast<uint32_t>(x >> 29 & 0x007fffffu));
}

// ---- Limits (exact values) ------------------------------------------------------------------

inline constexpr float kHalfMax = 65504.f;                          // (2 - 2^-10) * 2^15
inline constexpr float kHalfMinNormal = 6.103515625e-05f;           // 2^-14
inline constexpr float kHalfMinSubnormal = 5.9604644775390625e-08f; // 2^-24
inline constexpr float kBf16Max = 3.38953138925153547590470800371487867e+38f;  // (2 - 2^-7) * 2^127
inline constexpr float kBf16MinNormal = 1.17549435082228750796873653722224568e-38f;  // 2^-126
inline constexpr float kBf16MinSubnormal = 9.18354961579912115600575419704879436e-41f;  // 2^-133

// The bit-manipulation versions below are the reference (and what device code runs). On x86
// hosts with F16C (any -march from Haswell/Zen on) single values convert in hardware, and
// loops that vectorise use the branch-free forms. test_numeric checks all of them on every
// half bit pattern and every rounding midpoint, and against cuda_fp16.h when it is there.
// ---- FP16 <-> FP32 --------------------------------------------------------------------------

// Exact widening. A NaN keeps its payload and gets the quiet bit, as hardware converts.
ENGINE_HD float half_bits_to_float_soft(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // inf or NaN
    return bits_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);  // keeps -0
    // Subnormal m * 2^-24: shift the leading 1 up to the implicit position.
    uint32_t e = 113;  // float biased exponent of 2^-14
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));  // rebias 15 -> 127
}

// One round-to-nearest-even narrowing; overflow to inf from 65520 = 65504 + half an ulp.
ENGINE_HD uint16_t float_to_half_bits_soft(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf or NaN
    if (ax == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    // Keep the top payload bits and force the quiet bit so a NaN never becomes inf.
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // From 65520 on, the rounding below would also give inf, but larger values would overflow
  // the exponent field, so they are caught here.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520
  if (ax >= 0x38800000u) {  // normal half range, >= 2^-14
    // Add just under half an ulp, plus one if the kept lsb is odd: ties go to even.
    // A carry out of the mantissa correctly bumps the exponent.
    const uint32_t rounded = ax + 0xfffu + ((ax >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));  // rebias 127 -> 15
  }
  if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: tie or less -> 0
  // Subnormal result: the value in units of 2^-24 is m * 2^(e - 126), e in [102, 112].
  const uint32_t e = ax >> 23;
  const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14 .. 24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // q == 1024 encodes 2^-14: right
  return static_cast<uint16_t>(sign | q);
}

// The same two conversions without branches: every case is computed and the answer picked
// with bit masks, so a compiler turns a loop of them into SIMD code (F16C's scalar
// instructions keep a loop scalar). Alone they cost more than F16C's one instruction, so
// they are for loops that vectorise (load_simd/store_simd).
ENGINE_HD uint32_t select_bits(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - static_cast<uint32_t>(c);
  return (a & m) | (b & ~m);
}

ENGINE_HD float half_bits_to_float_simd(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t normal = (em << 13) + (112u << 23);  // rebias 15 -> 127
  // Subnormal m * 2^-24: the integer m converted and scaled, exact (no float subnormal
  // is ever formed, so DAZ/FTZ modes cannot change it).
  const uint32_t sub = float_bits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  const uint32_t special = 0x7f800000u | (em << 13) | select_bits((em & 0x3ffu) != 0, 0x400000u, 0u);
  return bits_float(sign | select_bits(em >= 0x7c00u, special, select_bits(em < 0x400u, sub, normal)));
}

ENGINE_HD uint16_t float_to_half_bits_simd(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  const uint32_t normal = (ax + 0xfffu + ((ax >> 13) & 1u) - 0x38000000u) >> 13;
  // Below 2^-14: adding 0.5 (whose ulp is 2^-24) rounds |f| to the subnormal grid with the
  // FPU's round-to-nearest-even; the mantissa bits of the sum are the subnormal half.
  const uint32_t sub = float_bits(bits_float(ax) + 0.5f) - 0x3f000000u;
  const uint32_t r = select_bits(ax > 0x7f800000u, nan,
                                 select_bits(ax >= 0x477ff000u, 0x7c00u, select_bits(ax >= 0x38800000u, normal, sub)));
  return static_cast<uint16_t>(sign | r);
}

// The conversions everything uses: F16C instructions on x86 hosts that have them (one
// instruction each, the fastest choice where a value is converted on its own), the
// hardware's cvt on the GPU, the bit manipulation above elsewhere. Loops meant to vectorise
// on the host use load_simd/store_simd below instead. Every path gives the same bits: cvt
// and F16C round to nearest even and are exact on widening; NaNs, whose payload rules vary
// between instructions, are patched on the GPU to the reference's (payload kept, quiet bit set).
ENGINE_HD float half_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0u;
  return nan ? bits_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7fc00000u |
                          (static_cast<uint32_t>(h & 0x3ffu) << 13))
             : f;
#elif defined(KERNELS_HOST_F16C)
  return _cvtsh_ss(h);
#else
  return half_bits_to_float_soft(h);
#endif
}

ENGINE_HD uint16_t float_to_half_bits(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  const uint32_t x = float_bits(f), ax = x & 0x7fffffffu;
  return ax > 0x7f800000u ? static_cast<uint16_t>(((x >> 16) & 0x8000u) | 0x7e00u | ((ax >> 13) & 0x3ffu)) : h;
#elif defined(KERNELS_HOST_F16C)
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
  return float_to_half_bits_soft(f);
#endif
}

// ---- BF16 <-> FP32 --------------------------------------------------------------------------

// BF16 is the top half of a float, so widening is a shift (a NaN stays a NaN, payload as is).
ENGINE_HD float bf16_bits_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

ENGINE_HD uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  // A NaN must not go through the rounding add: a low payload would carry into inf.
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  // Same RNE trick as for half; finite values past max + half an ulp carry into inf.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// The same bits without a branch, for loops meant to vectorise (store_simd, the tile kernels'
// stores): both results are formed and the NaN test selects one.
ENGINE_HD uint16_t float_to_bf16_bits_simd(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t quiet_nan = (x >> 16) | 0x0040u;
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(select_bits((x & 0x7fffffffu) > 0x7f800000u, quiet_nan, rounded));
}

// VCVTNEPS2BF16's rounding (Intel SDM): as float_to_bf16_bits, but a zero or FP32 denormal
// input gives a zero of its sign. The tile kernels round their FP32 sums with it on every unit
// (the instruction on AVX512-BF16 and AMX CPUs, this function in the emulation), so all units
// store the same bits; the sums themselves are never denormal (the tile products flush them).
ENGINE_HD uint16_t float_to_bf16_bits_ftz(float f) {
  const uint32_t x = float_bits(f);
  const bool tiny = (x & 0x7f800000u) == 0u;
  return static_cast<uint16_t>(select_bits(tiny, (x >> 16) & 0x8000u, float_to_bf16_bits_simd(f)));
}

// ---- FP64 -> small binary formats -----------------------------------------------------------

// Rounds a double straight to a format with EXP_BITS exponent and MAN_BITS mantissa bits
// (IEEE layout, subnormals, inf). Going through float first would round twice and can
// turn a value just above a tie into the tie itself.
template <int EXP_BITS, int MAN_BITS>
ENGINE_HD uint16_t double_to_small_float_bits(double d) {
  constexpr int kBias = (1 << (EXP_BITS - 1)) - 1;
  constexpr int kEmin = 1 - kBias;  // unbiased exponent of the smallest normal
  constexpr uint32_t kExpMask = (1u << EXP_BITS) - 1u;
  constexpr uint32_t kInf = kExpMask << MAN_BITS;
  const uint64_t x = double_bits(d);
  const uint32_t sign = static_cast<uint32_t>(x >> 48) & 0x8000u;
  const uint64_t ax = x & 0x7fffffffffffffffull;
  const int dexp = static_cast<int>(ax >> 52);
  if (dexp == 0x7ff) {
    if ((ax & 0xfffffffffffffull) == 0) return static_cast<uint16_t>(sign | kInf);
    const uint32_t payload = static_cast<uint32_t>(ax >> (52 - MAN_BITS)) & ((1u << MAN_BITS) - 1u);
    return static_cast<uint16_t>(sign | kInf | (1u << (MAN_BITS - 1)) | payload);
  }
  // Double subnormals (< 2^-1022) are far below half the smallest subnormal of any target.
  if (dexp == 0) return static_cast<uint16_t>(sign);
  const int e = dexp - 1023;
  const uint64_t m = (ax & 0xfffffffffffffull) | (1ull << 52);  // value = m * 2^(e - 52)
  // Number of low significand bits to drop: fewer kept bits once the result is subnormal.
  int shift = 52 - MAN_BITS + (e < kEmin ? kEmin - e : 0);
  if (shift > 54) return static_cast<uint16_t>(sign);  // below half the smallest subnormal
  const uint64_t q0 = m >> shift;
  const uint64_t rem = m & ((1ull << shift) - 1ull);
  const uint64_t halfway = 1ull << (shift - 1);
  const uint64_t q = q0 + ((rem > halfway || (rem == halfway && (q0 & 1u))) ? 1u : 0u);
  uint64_t bits;
  if (e < kEmin) {
    bits = q;  // subnormal; q == 2^MAN_BITS is the smallest normal's encoding
  } else {
    // Adding (q - implicit 1) lets a rounding carry bump the exponent.
    bits = (static_cast<uint64_t>(e + kBias) << MAN_BITS) + (q - (1ull << MAN_BITS));
    if (bits >= kInf) bits = kInf;
  }
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(bits));
}

ENGINE_HD uint16_t double_to_half_bits(double d) { return double_to_small_float_bits<5, 10>(d); }
ENGINE_HD uint16_t double_to_bf16_bits(double d) { return double_to_small_float_bits<8, 7>(d); }

// ---- Storage types --------------------------------------------------------------------------
// Plain 2-byte structs: trivially copyable so buffers can be memcpy'd and cudaMemcpy'd, and
// free of cuda_fp16.h so the CPU build does not need the toolkit. Arithmetic happens in
// float: the implicit conversion makes `a * b` on two halves a float expression.

struct half {
  uint16_t bits;

  half() = default;
  ENGINE_HD explicit half(float f) : bits(float_to_half_bits(f)) {}
  ENGINE_HD explicit half(double d) : bits(double_to_half_bits(d)) {}
  // Without this, half(1) would be ambiguous between the float and double constructors.
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  ENGINE_HD explicit half(I i) : half(static_cast<double>(i)) {}

  static ENGINE_HD half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
  ENGINE_HD operator float() const { return half_bits_to_float(bits); }
};

struct bfloat16 {
  uint16_t bits;

  bfloat16() = default;
  ENGINE_HD explicit bfloat16(float f) : bits(float_to_bf16_bits(f)) {}
  ENGINE_HD explicit bfloat16(double d) : bits(double_to_bf16_bits(d)) {}
  template <class I, typename std::enable_if<std::is_integral<I>::value, int>::type = 0>
  ENGINE_HD explicit bfloat16(I i) : bfloat16(static_cast<double>(i)) {}

  static ENGINE_HD bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
  ENGINE_HD operator float() const { return bf16_bits_to_float(bits); }
};

static_assert(sizeof(half) == 2 && alignof(half) == 2, "half must be 2 bytes");
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2, "bfloat16 must be 2 bytes");
static_assert(std::is_trivially_copyable<half>::value, "half must be trivially copyable");
static_assert(std::is_trivially_copyable<bfloat16>::value, "bfloat16 must be trivially copyable");
static_assert(std::is_trivial<half>::value && std::is_trivial<bfloat16>::value,
              "trivial, so device buffers of them need no construction");

// Named forms of the double constructors, for call sites where a cast would hide the intent.
ENGINE_HD half half_from_double(double d) { return half::from_bits(double_to_half_bits(d)); }
ENGINE_HD bfloat16 bfloat16_from_double(double d) {
  return bfloat16::from_bits(double_to_bf16_bits(d));
}

// ---- Accumulation type ----------------------------------------------------------------------
// Sums of half/bf16/float products are kept in float; double (gradient checks) in double.

template <class T>
struct acc_type {
  using type = float;
};
template <>
struct acc_type<double> {
  using type = double;
};
template <class T>
using acc_t = typename acc_type<T>::type;

// Accumulator back to storage with a single rounding (float -> half/bf16 is one RNE step).
// Call as from_acc<T>(v): the argument is not deduced on purpose.
template <class T>
ENGINE_HD T from_acc(acc_t<T> v) {
  return static_cast<T>(v);
}

// Widening load and rounding store for loops meant to vectorise: FP16 through the
// branch-free conversions, every other type as acc_t<T>(v) and from_acc<T>(v). The same
// bits either way; only the code the compiler can make of a loop differs.
template <class T>
ENGINE_HD acc_t<T> load_simd(T v) {
  if constexpr (std::is_same<T, half>::value) return half_bits_to_float_simd(v.bits);
  else return static_cast<acc_t<T>>(v);
}
template <class T>
ENGINE_HD T store_simd(acc_t<T> v) {
  if constexpr (std::is_same<T, half>::value) return half::from_bits(float_to_half_bits_simd(v));
  else if constexpr (std::is_same<T, bfloat16>::value) return bfloat16::from_bits(float_to_bf16_bits_simd(v));
  else return from_acc<T>(v);
}

}  // namespace kernels

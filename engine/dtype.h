// DType: the element types a Tensor can hold, their sizes and names, and the
// dispatch macro that turns a runtime dtype into a template parameter.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/error.h"
#include "kernels/numeric.h"

namespace engine {

using kernels::bfloat16;
using kernels::half;

enum class DType : uint8_t { F32, F64, F16, BF16, U8, I32, I64, I8 };  // I8: quantized weights

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::U8: return 1;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::I8: return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::U8: return "u8";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::I8: return "i8";
  }
  return "?";
}

inline bool is_floating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16;
}

// The largest finite value of a floating dtype (FP16 65504; BF16 shares FP32's exponent).
inline double dtype_max_finite(DType t) {
  switch (t) {
    case DType::F16: return kernels::kHalfMax;
    case DType::BF16: return 3.3895313892515355e38;  // (2 - 2^-7) * 2^127
    case DType::F32: return 3.4028234663852886e38;   // (2 - 2^-23) * 2^127
    case DType::F64: return 1.7976931348623157e308;
    default: ENGINE_FAIL("dtype_max_finite: " << dtype_name(t) << " is not floating");
  }
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<half> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<bfloat16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::U8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::I32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::I8; };

}  // namespace engine

// Runs the body with `T` bound to the C++ type of a floating dtype; any other dtype
// is an error naming the op.
#define ENGINE_DISPATCH_FLOAT(dtype, opname, T, ...)                                  \
  switch (dtype) {                                                                    \
    case ::engine::DType::F32: { using T = float; __VA_ARGS__; break; }               \
    case ::engine::DType::F64: { using T = double; __VA_ARGS__; break; }              \
    case ::engine::DType::F16: { using T = ::engine::half; __VA_ARGS__; break; }      \
    case ::engine::DType::BF16: { using T = ::engine::bfloat16; __VA_ARGS__; break; } \
    default:                                                                          \
      ENGINE_FAIL(opname << ": expected a floating dtype, got " << ::engine::dtype_name(dtype)); \
  }

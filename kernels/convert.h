// convert<To>(x): one correctly rounded conversion between any two of our float types,
// including double -> half/bfloat16 without the double rounding of going through float. NaNs
// keep sign and payload and come out quiet, on the host and on the GPU alike (numeric.h).
#pragma once

#include <type_traits>

#include "kernels/numeric.h"

namespace kernels {

template <class To, class From> ENGINE_HD To convert(From x) {
  if constexpr (std::is_same_v<To, From>) {
    return x;
  } else if constexpr (std::is_same_v<To, double>) {
    return float_to_double(static_cast<float>(x));  // float holds every half/bf16 exactly
  } else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, double>) {
    return double_to_float(x);
  } else if constexpr (std::is_same_v<To, float>) {
    return static_cast<float>(x);
  } else if constexpr (std::is_same_v<From, double>) {
    if constexpr (std::is_same_v<To, half>) return half_from_double(x);
    else return bfloat16_from_double(x);
  } else {
    return To(static_cast<float>(x));
  }
}

}  // namespace kernels

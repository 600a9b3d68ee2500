// The engine's error type: kernels::Error (kernels/error.h, where kernels throw it too) under the
// engine's name, with ENGINE_CHECK / ENGINE_FAIL.
#pragma once

#include "kernels/error.h"

namespace engine {
using kernels::Error;
using kernels::throw_error;
}  // namespace engine

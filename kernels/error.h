// The project's one error type and the check macros that throw it with file:line. It lives at
// the bottom (kernels/) so kernels and engine alike may throw it; engine/error.h names it
// engine::Error. Bad input of any kind ends in one; the trainer prints it and exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kernels {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line)
      : std::runtime_error(message + " [" + file + ":" + std::to_string(line) + "]"),
        message_(message) {}
  // The message alone, without the source location (for one-line user errors).
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

[[noreturn]] inline void throw_error(const std::string& message, const char* file, int line) {
  throw Error(message, file, line);
}

}  // namespace kernels

// ENGINE_CHECK(cond, a << b << c): throws the Error with the streamed message.
#define ENGINE_CHECK(cond, msg)                                          \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::ostringstream engine_check_os_;                               \
      engine_check_os_ << msg;                                           \
      ::kernels::throw_error(engine_check_os_.str(), __FILE__, __LINE__); \
    }                                                                    \
  } while (0)

#define ENGINE_FAIL(msg) ENGINE_CHECK(false, msg)

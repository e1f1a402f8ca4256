// Shared by the libFuzzer targets: what counts as a clean rejection.
//
// Every target feeds hostile bytes to one reader. A ckptfix::Error is the
// expected outcome for bad input; anything else that escapes (another
// exception, a crash, a sanitizer report, a timeout, running out of memory)
// is a finding, reported by libFuzzer with the input that caused it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ckptfix/error.h"

namespace ckptfix::fuzz {

inline std::string bytes_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

/// Runs f; swallows ckptfix::Error (bad input, refused cleanly).
template <typename F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

}  // namespace ckptfix::fuzz

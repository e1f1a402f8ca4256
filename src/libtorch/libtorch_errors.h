// LibTorch's exceptions (c10::Error) as ckptfix::Error, so callers of the
// bridge catch one type.
#pragma once

#include <c10/util/Exception.h>

#include <string>

#include "ckptfix/error.h"

namespace ckptfix::libtorch {

/// The first line of a c10::Error's message (LibTorch appends a backtrace).
inline std::string first_line(const c10::Error& e) {
  std::string message = e.what_without_backtrace();
  const auto nl = message.find('\n');
  return nl == std::string::npos ? message : message.substr(0, nl);
}

/// A c10::Error as a ckptfix::Error; CUDA problems become kGpu.
inline Error from_libtorch(const c10::Error& e) {
  const std::string message = first_line(e);
  const bool gpu = message.find("CUDA") != std::string::npos || message.find("cuda") != std::string::npos;
  return Error(gpu ? ErrorKind::kGpu : ErrorKind::kUnsupported, "LibTorch: " + message);
}

}  // namespace ckptfix::libtorch

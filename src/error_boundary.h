// The library's one error boundary: only ckptfix::Error leaves a public
// function.
//
// Whatever else is thrown below (std::bad_alloc when a file needs more
// memory than the machine has, a std::length_error or std::out_of_range
// that would be a bug) becomes an Error naming the file, so that a caller
// (and the CLI) gets the usual one line instead of an unknown exception.
#pragma once

#include <new>
#include <stdexcept>
#include <string>

#include "ckptfix/error.h"

namespace ckptfix {

/// Runs `body`, turning every exception into a ckptfix::Error about `file`
/// (a ckptfix::Error that names no file yet gets `file` too, unless
/// `name_errors` is false: the caller names its own).
template <typename Body>
auto error_boundary(const std::string& file, Body&& body, bool name_errors = true) -> decltype(body()) {
  try {
    return body();
  } catch (Error& e) {
    if (name_errors && !file.empty()) e.in_file(file);
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::kLimit, "out of memory (the file needs more than this machine can allocate)").in_file(file);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kInternal,
                std::string("internal error: ") + e.what() + " (a bug in ckptfix; please report it with the file)")
        .in_file(file);
  }
}

}  // namespace ckptfix

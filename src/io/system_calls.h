// What every file of io/ does around system calls: an Error from errno, and
// writing a whole buffer to a file descriptor.
#pragma once

#include <cstddef>
#include <span>
#include <string>

#include "ckptfix/error.h"

namespace ckptfix {

/// Error(kIo) "<what>: <errno's message>", for the caller to name the file.
Error system_error(const std::string& what);

/// Writes all of `data` to `fd` at its file position, through short and
/// interrupted writes; throws system_error("write failed") naming `file`.
void write_all(int fd, std::span<const std::byte> data, const std::string& file);

/// Error(kIo) naming `file`: an input ended before the range being copied from it did.
Error input_ended_during_copy(const std::string& file);

}  // namespace ckptfix

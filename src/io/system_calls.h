// What every file of io/ does around system calls: an Error from errno, and
// writing a whole buffer to a file descriptor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "ckptfix/error.h"

namespace ckptfix {

/// Error(kIo) "<what>: <errno's message>", for the caller to name the file.
Error system_error(const std::string& what);

/// Writes all of `data` to `fd` at its file position, through short and
/// interrupted writes; throws system_error("write failed") naming `file`.
void write_all(int fd, std::span<const std::byte> data, const std::string& file);
/// The same at `offset`, leaving the file position alone (pwrite).
void pwrite_all(int fd, std::span<const std::byte> data, uint64_t offset, const std::string& file);

/// Error(kIo): an input ended before the range being copied from it did
/// (the caller, who knows the input, names it).
Error input_ended_during_copy();

/// Error(kIo): a file ended before a range checked against its size did
/// (another program truncated it meanwhile), or a mapped file lost pages
/// while they were read (mapping_guard.h; also a page the kernel could not read).
Error file_shrank_while_read();

}  // namespace ckptfix

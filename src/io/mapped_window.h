// Reading a file range without copying it: windows of the range are mapped,
// handed to a callback, and unmapped again, so hashing reads straight from
// the page cache while resident memory stays at one window, whatever the
// range's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace ckptfix {

/// The most for_each_mapped maps at once.
constexpr uint64_t kMappedWindow = uint64_t{8} << 20;

/// Calls `visit` on consecutive views covering [offset, offset + size) of
/// `fd`, each at most kMappedWindow bytes. Throws Error(kIo) naming `file` (unless empty)
/// and `what` if mapping fails, or if the file shrank while a view was read
/// (mapping_guard.h: zeros were read where its bytes were lost; what the
/// visits made of them is to be dropped).
void for_each_mapped(int fd, const std::string& file, uint64_t offset, uint64_t size, const std::string& what,
                     const std::function<void(std::span<const std::byte>)>& visit);

}  // namespace ckptfix

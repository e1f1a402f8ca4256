#include "io/system_calls.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/interrupt.h"

namespace ckptfix {

Error system_error(const std::string& what) { return Error(ErrorKind::kIo, what + ": " + std::strerror(errno)); }

void write_all(int fd, std::span<const std::byte> data, const std::string& file) {
  stop_point();  // every write of an output passes here
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("write failed").in_file(file);
    data = data.subspan(static_cast<size_t>(n));
  }
}

void pwrite_all(int fd, std::span<const std::byte> data, uint64_t offset, const std::string& file) {
  stop_point();
  while (!data.empty()) {
    const ssize_t n = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("write failed").in_file(file);
    data = data.subspan(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
}

Error input_ended_during_copy() {
  return Error(ErrorKind::kIo, "the input ended during the copy (was it changed meanwhile?)");
}

Error file_shrank_while_read() {
  return Error(ErrorKind::kIo,
               "the file shrank while being read (truncated or rewritten by another program?) or could not be read");
}

}  // namespace ckptfix

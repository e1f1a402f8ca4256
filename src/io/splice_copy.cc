#include "io/splice_copy.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

#include "ckptfix/error.h"
#include "io/interrupt.h"
#include "io/system_calls.h"

namespace ckptfix {
namespace {

// Unprivileged processes may make pipes up to /proc/sys/fs/pipe-max-size,
// 1 MiB by default (larger ones need CAP_SYS_RESOURCE and were not measured).
constexpr int kPipeSize = 1 << 20;

// The errors with which splice says that a file cannot take part (a file
// system without splice_read/splice_write, a file opened with O_APPEND).
bool does_not_splice(int error) {
  return error == EINVAL || error == ENOSYS || error == EOPNOTSUPP || error == EBADF || error == EXDEV;
}

}  // namespace

std::unique_ptr<SpliceCopy> SpliceCopy::open() {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return nullptr;
  const int capacity = ::fcntl(ends[1], F_SETPIPE_SZ, kPipeSize);
  if (capacity < kPipeSize) {
    ::close(ends[0]);
    ::close(ends[1]);
    return nullptr;
  }
  return std::unique_ptr<SpliceCopy>(new SpliceCopy(ends[0], ends[1], static_cast<size_t>(capacity)));
}

SpliceCopy::SpliceCopy(int read_end, int write_end, size_t capacity)
    : read_end_(read_end), write_end_(write_end), capacity_(capacity) {}

SpliceCopy::~SpliceCopy() {
  ::close(read_end_);
  ::close(write_end_);
}

uint64_t SpliceCopy::copy(int in, uint64_t offset, uint64_t length, int out, const std::string& output) {
  loff_t at = static_cast<loff_t>(offset);
  uint64_t done = 0;
  while (done < length) {
    stop_point();  // the pipe is empty here
    const size_t want = static_cast<size_t>(std::min<uint64_t>(capacity_, length - done));
    const ssize_t got = ::splice(in, &at, write_end_, nullptr, want, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && does_not_splice(errno)) return done;
    if (got < 0) throw system_error("reading the input failed");  // the caller names the input
    if (got == 0) throw input_ended_during_copy();
    size_t pending = static_cast<size_t>(got);
    while (pending > 0) {
      const ssize_t put = ::splice(read_end_, nullptr, out, nullptr, pending, 0);
      if (put < 0 && errno == EINTR) continue;
      if (put < 0 && does_not_splice(errno)) {
        drain(out, pending, output);
        return done + static_cast<uint64_t>(got);
      }
      if (put == 0) errno = EIO;  // a file that takes nothing: not expected, not looped on
      if (put <= 0) throw system_error("write failed").in_file(output);
      pending -= static_cast<size_t>(put);
    }
    done += static_cast<uint64_t>(got);
  }
  return done;
}

void SpliceCopy::drain(int out, size_t pending, const std::string& output) {
  std::array<char, 64 << 10> buffer;
  while (pending > 0) {
    const ssize_t n = ::read(read_end_, buffer.data(), std::min(buffer.size(), pending));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw system_error("reading the copy's pipe failed").in_file(output);
    write_all(out, std::as_bytes(std::span(buffer.data(), static_cast<size_t>(n))), output);
    pending -= static_cast<size_t>(n);
  }
}

}  // namespace ckptfix

#include "io/atomic_file.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <sys/types.h>

#include "ckptfix/error.h"
#include "io/interrupt.h"
#include "io/splice_copy.h"
#include "io/system_calls.h"

namespace ckptfix {
namespace {

constexpr size_t kBufferSize = size_t{1} << 20;
constexpr uint64_t kPageSize = 4096;
constexpr const char* kTempMarker = ".ckptfix-";
constexpr const char* kTempSuffix = ".tmp";

Error io_error(const std::string& what, const std::filesystem::path& file) {
  return system_error(what).in_file(file.string());
}

std::string temp_prefix(const std::filesystem::path& target) {
  std::string prefix = ".";  // built step by step: GCC 12 warns falsely (-Wrestrict) on "." + string
  prefix += target.filename().string();
  prefix += kTempMarker;
  return prefix;
}

std::string what_kind_of_file(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Where a write goes, and what is there now.
struct Destination {
  std::filesystem::path path;
  std::optional<struct stat> existing;  // the file there now, if any
};

// The file a write replaces: the target, or the file it leads to where the
// target is a symbolic link (torch.save and cp write through a link;
// renaming over the link would leave the file it names unchanged). Anything
// but a regular file already there is refused before anything is written:
// renaming over a device, FIFO or socket replaces the node itself (as root,
// an output of /dev/null would replace /dev/null with a checkpoint), and
// over a directory it fails only once everything is written.
Destination destination_of(const std::filesystem::path& target, bool follow_link) {
  struct stat st {};
  // Not there (or not reachable): creating the temporary file beside it says why.
  if (::lstat(target.c_str(), &st) != 0) return {target, std::nullopt};
  std::filesystem::path destination = target;
  // Where links are not followed, a link is what is there: replaced as any
  // output is, the file it leads to left alone.
  if (S_ISLNK(st.st_mode) && !follow_link) return {target, st};
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    destination = std::filesystem::canonical(target, ec);
    if (ec || ::stat(destination.c_str(), &st) != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  "is a symbolic link that leads to no file (" + (ec ? ec.message() : std::string(std::strerror(errno))) +
                      "): a write never goes through a dangling link")
          .in_file(target.string());
    }
  }
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::kInvalidArgument,
                "is " + what_kind_of_file(st.st_mode) + ": an output must be a regular file, and nothing else is ever replaced")
        .in_file(target.string());
  }
  return {destination, st};
}

// Refuses what `fence` forbids for a write of `target` (outputs.h): a
// target outside `within` or below a link there, and a target that is an
// input of the run other than the one it may replace.
void check_fence(const std::filesystem::path& target, const OutputFence& fence) {
  namespace fs = std::filesystem;
  const bool confined = !fence.within.empty();
  if (confined) {
    const fs::path within = fs::absolute(fence.within).lexically_normal();
    const fs::path rel = fs::absolute(target).lexically_normal().lexically_relative(within);
    if (rel.empty() || *rel.begin() == ".." || *rel.begin() == ".") {
      throw Error(ErrorKind::kConflict, "is outside '" + fence.within.string() + "', where this run writes")
          .in_file(target.string());
    }
    // Every directory between `within` and the file: a link among them
    // would take the write elsewhere.
    fs::path dir = within, shown = fence.within;
    for (const fs::path& part : rel.parent_path()) {
      dir /= part;
      shown /= part;
      struct stat st {};
      if (::lstat(dir.c_str(), &st) != 0) break;  // not there: creating the file says so
      if (S_ISLNK(st.st_mode)) {
        throw Error(ErrorKind::kConflict, "'" + shown.string() + "' is a symbolic link: nothing is written through a link "
                                          "below '" + fence.within.string() + "', where this run writes")
            .in_file(target.string());
      }
    }
  }
  if (!fence.inputs || fence.inputs->empty()) return;
  struct stat st {};
  // Under `within`, a link at the target is replaced, not followed: only
  // the file itself can be an input.
  const int found = confined ? ::lstat(target.c_str(), &st) : ::stat(target.c_str(), &st);
  if (found != 0) return;
  const FileId id{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  if (fence.inputs->count(id) != 0 && fence.replaceable != id) {
    throw Error(ErrorKind::kConflict,
                "is an input of this run (by this name or another): a run never writes onto its inputs, "
                "except an in-place rewrite of each (`in_place`)")
        .in_file(target.string());
  }
}

// Reads up to `n` bytes at `at` of `fd` into `buffer`, through short and
// interrupted reads; how many it read (fewer at the end of the file), or -1.
ssize_t read_at(int fd, char* buffer, size_t n, off_t at) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, buffer + done, n - done, at + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -1;
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return static_cast<ssize_t>(done);
}

// Whether the files `one` and `other` hold the same bytes.
bool same_bytes(const std::filesystem::path& one, const std::filesystem::path& other) {
  const int a = ::open(one.c_str(), O_RDONLY | O_CLOEXEC);
  const int b = ::open(other.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat sa {}, sb {};
  bool same = a >= 0 && b >= 0 && ::fstat(a, &sa) == 0 && ::fstat(b, &sb) == 0 && sa.st_size == sb.st_size;
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<char> x(same ? kChunk : 0), y(same ? kChunk : 0);
  for (off_t at = 0; same && at < sa.st_size;) {
    stop_point();
    const ssize_t n = read_at(a, x.data(), kChunk, at);
    same = n > 0 && read_at(b, y.data(), kChunk, at) == n && std::memcmp(x.data(), y.data(), static_cast<size_t>(n)) == 0;
    at += n;
  }
  if (a >= 0) ::close(a);
  if (b >= 0) ::close(b);
  return same;
}

bool process_alive(long pid) {
  if (pid <= 0) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// Whether copy_file_range may be a copy made by the server (NFS 4.2, SMB,
// Ceph, FUSE file systems that implement it), without the bytes crossing
// the network. Elsewhere it is the kernel's splice through a 64 KiB pipe,
// slower than ours (docs/performance.md, "Copy speed on four file systems").
bool copies_on_a_server(unsigned long file_system) {
  switch (file_system) {
    case 0x6969UL:      // NFS
    case 0xFF534D42UL:  // CIFS
    case 0xFE534D42UL:  // SMB2
    case 0x00C36400UL:  // Ceph
    case 0x65735546UL:  // FUSE
      return true;
    default:
      return false;
  }
}

// Whether two threads writing the file at once (write_at) is slower than
// one: on btrfs an unverified cast took 3-7 % longer so, on ext4, xfs and
// tmpfs 4-21 % less (docs/performance.md, "Both threads through every stage").
bool one_writer_is_faster(unsigned long file_system) { return file_system == 0x9123683EUL; }  // btrfs

// Whether blocks allocated in one call (fallocate) before a range is
// written make the writes quicker. On ext4, a write to blocks not yet
// allocated reserves them one by one (delayed allocation: its extent cache,
// its free-block and quota counters), under the file's lock, which the two
// writers of write_at() take turns for; to blocks allocated beforehand
// (unwritten extents) it is the copy alone. An unverified cast took 0.87x
// `cp` of its output so against 1.10x without, unread copies 0.63-0.67x
// `cp` against 0.92-0.96x, one thread writing 512 MiB 0.157 s against
// 0.191 s; on tmpfs, which zeroes the pages it allocates, and on xfs it was
// slower (docs/performance.md, "Blocks allocated first").
bool allocating_first_is_faster(unsigned long file_system) { return file_system == 0xEF53UL; }  // ext2/3/4

// The magic number of the file system `fd` is on (statfs(2)); 0 if unknown.
unsigned long file_system_of(int fd) {
  struct statfs fs {};
  return ::fstatfs(fd, &fs) == 0 ? static_cast<unsigned long>(fs.f_type) : 0;
}

}  // namespace

FileSink::FileSink(int fd, std::string name, bool allocate_first)
    : fd_(fd),
      name_(std::move(name)),
      buffer_(new std::byte[kBufferSize]) {
  const unsigned long file_system = file_system_of(fd);
  server_copy_ = copies_on_a_server(file_system);
  write_at_ = !one_writer_is_faster(file_system);
  allocate_first_ = allocate_first && allocating_first_is_faster(file_system);
}

FileSink::~FileSink() = default;

void FileSink::write(std::span<const std::byte> data) {
  position_ += data.size();
  if (used_ + data.size() <= kBufferSize) {
    std::memcpy(buffer_.get() + used_, data.data(), data.size());
    used_ += data.size();
    return;
  }
  flush();
  if (data.size() >= kBufferSize) {
    write_all(fd_, data, name_);
  } else {
    std::memcpy(buffer_.get(), data.data(), data.size());
    used_ = data.size();
  }
}

uint64_t FileSink::reserve(uint64_t length) {
  flush();
  const uint64_t offset = position_;
  position_ += length;
  // write() and the copies go on from the file offset, after the range.
  if (::lseek(fd_, static_cast<off_t>(position_), SEEK_SET) < 0) throw system_error("cannot seek").in_file(name_);
  return offset;
}

void FileSink::write_at(uint64_t offset, std::span<const std::byte> data) { pwrite_all(fd_, data, offset, name_); }

bool FileSink::copy_from(int fd, uint64_t offset, uint64_t length) {
  flush();
  if (server_copy_ && copy_in_kernel(fd, offset, length)) return true;
  // What no copy can match is sharing the blocks (XFS with reflink,
  // btrfs): the whole blocks of the range are cloned where the input's and
  // the output's offsets agree within a block (the zip writer pads records
  // to their input's page phase for this), the pieces at either end copied.
  uint64_t done = 0;
  if (clone_supported_ && offset % kPageSize == position_ % kPageSize) {
    const uint64_t head = std::min(length, (kPageSize - offset % kPageSize) % kPageSize);
    const uint64_t blocks = (length - head) / kPageSize * kPageSize;
    if (blocks > 0) {
      copy_bytes(fd, offset, head);
      if (clone_blocks(fd, offset + head, blocks)) done = head + blocks;
      else done = head;
    }
  }
  copy_bytes(fd, offset + done, length - done);
  return true;
}

void FileSink::expect(uint64_t length) {
  // Only quicker, never needed: where it fails (no room: the writes then
  // say so, at their place), the writes allocate as they go. (Not
  // FALLOC_FL_KEEP_SIZE: the file's size covers the range at once, so the
  // writes into it need not move the size, and measured the same.)
  if (allocate_first_ && length > 0) {
    (void)::fallocate(fd_, 0, static_cast<off_t>(position_), static_cast<off_t>(length));
  }
}

void FileSink::copy_bytes(int fd, uint64_t offset, uint64_t length) {
  if (length == 0) return;
  if (!splice_tried_) {
    splice_ = SpliceCopy::open();  // nullptr without a 1 MiB pipe: the buffer instead
    splice_tried_ = true;
  }
  uint64_t done = 0;
  if (splice_) {
    done = splice_->copy(fd, offset, length, fd_, name_);
    position_ += done;
    if (done < length) splice_.reset();  // one of the files does not splice: not tried again
  }
  copy_through_buffer(fd, offset + done, length - done);
}

bool FileSink::copy_in_kernel(int fd, uint64_t offset, uint64_t length) {
  loff_t in = static_cast<loff_t>(offset);
  uint64_t left = length;
  while (left > 0) {
    stop_point();
    const ssize_t n = ::copy_file_range(fd, &in, fd_, nullptr, left, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (left == length && (n == 0 || errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
                             errno == EBADF || errno == EPERM)) {
        server_copy_ = false;  // e.g. another file system type: copied here instead
        return false;
      }
      throw io_error("copy_file_range failed", name_);
    }
    left -= static_cast<uint64_t>(n);
  }
  position_ += length;
  return true;
}

bool FileSink::clone_blocks(int fd, uint64_t offset, uint64_t length) {
  struct file_clone_range range {};
  range.src_fd = fd;
  range.src_offset = offset;
  range.src_length = length;
  range.dest_offset = position_;
  if (::ioctl(fd_, FICLONERANGE, &range) != 0) {
    // Not a file system that shares blocks (ext4, tmpfs: EOPNOTSUPP; XFS
    // without reflink; another file system: EXDEV; blocks larger than
    // 4 KiB: EINVAL): copied instead, and not asked again for this file.
    if (errno == EOPNOTSUPP || errno == ENOTTY || errno == EXDEV || errno == EINVAL || errno == EBADF ||
        errno == EPERM || errno == ETXTBSY || errno == ENOSYS || errno == EINTR) {
      clone_supported_ = false;
      return false;
    }
    throw io_error("cloning the input's blocks failed", name_);
  }
  position_ += length;
  // The ioctl leaves the file offset where it was: the next write goes after the clone.
  if (::lseek(fd_, static_cast<off_t>(position_), SEEK_SET) < 0) throw io_error("seek failed", name_);
  return true;
}

void FileSink::copy_through_buffer(int fd, uint64_t offset, uint64_t length) {
  for (uint64_t done = 0; done < length;) {
    stop_point();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kBufferSize, length - done));
    const ssize_t n = ::pread(fd, buffer_.get(), want, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw system_error("reading the input failed");  // the caller names the input
    if (n == 0) throw input_ended_during_copy();
    write_all(fd_, std::span<const std::byte>(buffer_.get(), static_cast<size_t>(n)), name_);
    done += static_cast<uint64_t>(n);
  }
  position_ += length;
}

void FileSink::flush() {
  if (used_ == 0) return;
  write_all(fd_, std::span<const std::byte>(buffer_.get(), used_), name_);
  used_ = 0;
}

AtomicFile::AtomicFile(std::filesystem::path target, bool overwrite, const OutputPolicy* policy)
    : target_(std::move(target)), overwrite_(overwrite), keep_identical_(policy != nullptr && policy->keep_identical) {
  stop_point();  // nothing is started once the run is told to stop
  const bool confined = policy != nullptr && !policy->fence.within.empty();
  if (policy != nullptr) check_fence(target_, policy->fence);
  const Destination destination = destination_of(target_, /*follow_link=*/!confined);
  destination_ = destination.path;
  if (!overwrite_ && !keep_identical_ && destination.existing) {
    throw Error(ErrorKind::kExists, "output exists").in_file(target_.string());
  }
  std::error_code ec;
  for (const auto& stale : stale_temporaries(destination_)) std::filesystem::remove(stale, ec);

  // Beside the file it replaces, so that the rename stays in one file system.
  const std::filesystem::path dir = destination_.parent_path();
  // pid (to tell stale files from live ones) and a per-process counter (to
  // keep concurrent writers in one process apart).
  static std::atomic<unsigned> counter{0};
  temp_ = dir / (temp_prefix(destination_) + std::to_string(::getpid()) + "-" + std::to_string(counter++) + kTempSuffix);
  // The rename puts the new file's owner and permissions in place of the
  // target's: keep the target's (--in-place, --force), or `sudo ckptfix
  // ... --in-place` would hand a user's checkpoint to root.
  // A link replaced (confined to a directory) gives nothing to keep: its mode is no file's.
  const std::optional<struct stat> replaced =
      destination.existing && S_ISREG(destination.existing->st_mode) ? destination.existing : std::nullopt;
  const int fd = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, replaced ? replaced->st_mode & 07777 : 0666);
  if (fd < 0) {
    // Named by the output asked for: the temporary file's name means nothing to the user.
    throw io_error("cannot create a file in " + (dir.empty() ? std::string("the current directory") : "'" + dir.string() + "'") +
                       " (an output is written to a new file in its directory, then renamed into place)",
                   target_);
  }
  temporary_ticket_ = remember_temporary(temp_.string());
  if (replaced) {
    // Owner and group where allowed (root), else the group alone (a member
    // of it), else the writer's, as for any new file (as sed -i does).
    if (::fchown(fd, replaced->st_uid, replaced->st_gid) != 0) {
      [[maybe_unused]] const int group_only = ::fchown(fd, static_cast<uid_t>(-1), replaced->st_gid);
    }
    // After fchown, which may clear set-ID bits; and past the umask, which
    // open() applied.
    ::fchmod(fd, replaced->st_mode & 07777);
  }
  // Write errors name the output asked for: the temporary file is ours,
  // and gone once the error is reported. Blocks are allocated ahead of the
  // bulk writes only where no file is replaced: renamed over one, a file
  // still waiting for its blocks has them allocated and written first by
  // ext4 (auto_da_alloc), so that a crash leaves the old file or the new
  // one; blocks allocated ahead would skip that, and a crash could leave
  // zeros under the old name.
  sink_ = std::make_unique<FileSink>(fd, target_.string(), /*allocate_first=*/!replaced);
}

AtomicFile::~AtomicFile() {
  if (sink_) ::close(sink_->fd());
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(temp_, ec);
  }
  forget_temporary(temporary_ticket_);
}

bool AtomicFile::set_attribute(const char* name, const std::string& value) {
  return ::fsetxattr(sink_->fd(), name, value.data(), value.size(), 0) == 0;
}

struct stat AtomicFile::status() const {
  struct stat st {};
  if (::fstat(sink_->fd(), &st) != 0) throw io_error("cannot read the new file's status", temp_);
  return st;
}

ByteSink& AtomicFile::sink() { return *sink_; }

void AtomicFile::flush() { sink_->flush(); }

bool AtomicFile::commit(bool sync) {
  sink_->flush();
  // An output already there, kept where it holds the very bytes written.
  struct stat there {};
  if (keep_identical_ && !overwrite_ && ::lstat(destination_.c_str(), &there) == 0) {
    if (S_ISREG(there.st_mode) && same_bytes(temp_, destination_)) return false;  // the destructor removes ours
    throw Error(ErrorKind::kExists, S_ISREG(there.st_mode) ? "output exists, and its bytes differ from what this run writes"
                                                           : "output exists")
        .in_file(target_.string());
  }
  if (sync && ::fsync(sink_->fd()) != 0) throw io_error("fsync failed", temp_);
  // A file being rewritten from what it held when it was read: if another
  // program wrote, replaced or removed it meanwhile (a training run saving a
  // newer checkpoint there), renaming over it would throw that away. (Checked
  // just before the rename; a change in between is not caught.)
  if (expected_ && stamp_of(target_) != expected_) {
    throw Error(ErrorKind::kConflict,
                "the file changed while it was being rewritten (another program wrote, replaced or removed it): "
                "it was not replaced; nothing was written")
        .in_file(target_.string());
  }
  if (overwrite_) {
    if (::rename(temp_.c_str(), destination_.c_str()) != 0) {
      throw io_error("cannot rename the finished file into place", target_);
    }
  } else {
    // renameat2(RENAME_NOREPLACE) is not everywhere; link() also refuses to replace.
    if (::link(temp_.c_str(), destination_.c_str()) != 0) {
      if (errno == EEXIST) {
        throw Error(ErrorKind::kExists, "output appeared while writing")
            .in_file(target_.string());
      }
      throw io_error("cannot move the finished file into place", target_);
    }
    ::unlink(temp_.c_str());
  }
  committed_ = true;
  forget_temporary(temporary_ticket_);
  if (sync) sync_directory(destination_.parent_path());
  return true;
}

std::vector<std::filesystem::path> AtomicFile::stale_temporaries(const std::filesystem::path& target) {
  std::vector<std::filesystem::path> out;
  const std::filesystem::path dir = target.parent_path().empty() ? "." : target.parent_path();
  const std::string prefix = temp_prefix(target);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + 4 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (name.compare(name.size() - 4, 4, kTempSuffix) != 0) continue;
    const std::string id = name.substr(prefix.size(), name.size() - prefix.size() - 4);  // "<pid>-<n>"
    char* end = nullptr;
    const long value = std::strtol(id.c_str(), &end, 10);
    if (id.empty() || *end != '-') continue;
    if (!process_alive(value)) out.push_back(target.parent_path() / name);
  }
  return out;
}

}  // namespace ckptfix

// Writing an output file so that it is never seen half-written.
//
// Bytes go to a temporary file in the target's directory, named
// ".<target name>.ckptfix-<pid>-<n>.tmp" so a leftover from a killed run is
// recognisable. commit() flushes, renames it over the target (or, without
// overwrite, fails if the target appeared meanwhile) and, when asked, fsyncs
// the file before and the directory after. Destroying an AtomicFile that was not committed removes the
// temporary file, so failures leave nothing behind and never touch the target.
// Every temporary file is in the table interrupt.h's remove_temporary_files()
// empties while it exists.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckptfix/outputs.h"
#include "io/byte_sink.h"
#include "io/file_stamp.h"

namespace ckptfix {

class FileSink;
class SpliceCopy;

class AtomicFile {
 public:
  /// Creates the temporary file. Throws Error(kExists) if the target exists
  /// and `overwrite` is false, Error(kIo) if the directory is not writable,
  /// Error(kInvalidArgument) if the target is there but is not a regular
  /// file (a directory, device, FIFO or socket, a dangling link). A target
  /// that is a symbolic link is written through: the file it leads to is
  /// replaced and the link kept; unless `policy`'s fence confines writes to
  /// a directory, where a link is replaced itself (outputs.h). Throws
  /// Error(kConflict) for a target the fence forbids, and Error(kInterrupted)
  /// once interrupt_writes() was called. With the policy's keep_identical, an
  /// existing target is not refused here (see commit). Removes stale
  /// temporaries of the same target left by dead processes.
  AtomicFile(std::filesystem::path target, bool overwrite, const OutputPolicy* policy = nullptr);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  ByteSink& sink();
  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temp_path() const { return temp_; }
  /// Flushes buffered bytes so the temporary file can be re-read.
  void flush();
  /// Has commit() replace the target only if it is still `expected` (the
  /// target is a file being read: the output was made from it as it was).
  void replace_only_if_unchanged(const FileStamp& expected) { expected_ = expected; }
  /// Makes the new file the target. With `sync`, the data is flushed to
  /// disk (fsync) before the rename and the directory after it, so the
  /// result also survives a power loss. After this the destructor does nothing.
  /// Throws Error(kConflict), leaving the target alone, if the target is
  /// not what replace_only_if_unchanged() expects. With the policy's
  /// keep_identical and a target already there: returns false, leaving the
  /// target as it is and removing the new file, when both hold the same
  /// bytes; throws Error(kExists) when they differ. Otherwise returns true.
  bool commit(bool sync);

  /// Sets an extended attribute of the new file (before commit); false
  /// where the file system keeps none (nothing else is done then).
  bool set_attribute(const char* name, const std::string& value);
  /// The new file's status (fstat), as it is now.
  struct stat status() const;
  /// The file commit() kept or replaced: the target, or where its link leads.
  const std::filesystem::path& destination() const { return destination_; }

  /// Temporaries of `target` whose writer process is gone (for tests and cleanup).
  static std::vector<std::filesystem::path> stale_temporaries(const std::filesystem::path& target);

 private:
  std::filesystem::path target_;       // the name asked for (messages, the change check)
  std::filesystem::path destination_;  // the file replaced: the target, or where its link leads
  std::filesystem::path temp_;
  bool overwrite_;
  bool keep_identical_ = false;
  uint64_t temporary_ticket_ = 0;  // its entry in the table of temporaries (io/interrupt.h)
  std::optional<FileStamp> expected_;
  bool committed_ = false;
  std::unique_ptr<FileSink> sink_;
};

/// A buffered sink on a file descriptor.
class FileSink final : public ByteSink {
 public:
  /// `allocate_first`: expect() allocates the range's blocks before it is
  /// written, where the file system writes faster so.
  FileSink(int fd, std::string name, bool allocate_first = false);
  ~FileSink() override;
  void write(std::span<const std::byte> data) override;
  uint64_t position() const override { return position_; }
  void flush() override;
  bool can_copy_from() const override { return true; }
  bool copy_from(int fd, uint64_t offset, uint64_t length) override;
  void expect(uint64_t length) override;
  bool can_write_at() const override { return write_at_; }
  uint64_t reserve(uint64_t length) override;
  void write_at(uint64_t offset, std::span<const std::byte> data) override;
  int fd() const { return fd_; }

 private:
  void copy_bytes(int fd, uint64_t offset, uint64_t length);
  void copy_through_buffer(int fd, uint64_t offset, uint64_t length);
  bool copy_in_kernel(int fd, uint64_t offset, uint64_t length);
  bool clone_blocks(int fd, uint64_t offset, uint64_t length);

  int fd_;
  std::string name_;
  uint64_t position_ = 0;
  std::unique_ptr<std::byte[]> buffer_;
  size_t used_ = 0;
  bool clone_supported_ = true;  // FICLONERANGE: until the file system says no
  bool server_copy_;             // copy_file_range: until it says no
  bool write_at_;                // offered: where two threads writing at once is not slower than one
  bool allocate_first_;          // expect() allocates the range's blocks in one call (fallocate)
  bool splice_tried_ = false;
  std::unique_ptr<SpliceCopy> splice_;  // the copy elsewhere (copy_bytes)
};

}  // namespace ckptfix

// A read-only input file, read through bounded windows and pread only.
//
// Why not one mapping of the whole file: on current kernels a file that sits
// in the page cache (after a download, a `cp`, a `cat`) is held in large
// folios, and touching one byte of a MAP_SHARED mapping maps the whole folio
// into the process: reading a local header per zip record added about 2 MiB
// of resident memory per record (508 MiB for `inspect` of a 1 GiB file of
// 256 records; issue 25). So the small structures ckptfix parses (zip
// directories and headers, small records, safetensors and JSON headers) are
// read with pread into buffers the caller owns (read_bytes), a pickle that is
// parsed where it lies gets a mapping of just its record, unmapped when the
// parse is done (map_range), and bulk tensor bytes are read with pread into a
// small reused buffer, or copied by the kernel. Files of up to 8 MiB are
// simply read into memory when opened. The only mappings of the whole file
// are made on request, for zero-copy views a caller keeps (shared_mapping,
// private_mapping), and only the pages such a caller touches come in.
#pragma once

#include <mutex>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/file_stamp.h"
#include "io/mapping_guard.h"

namespace ckptfix {

/// Bytes of a file: a view of an in-memory file's bytes, or a buffer of their
/// own (read with pread). Valid while the FileBytes lives (and the file).
class FileBytes {
 public:
  FileBytes() = default;
  static FileBytes view(std::span<const std::byte> bytes);
  static FileBytes owned(std::vector<std::byte> bytes);
  FileBytes(FileBytes&&) noexcept = default;
  FileBytes& operator=(FileBytes&&) noexcept = default;

  std::span<const std::byte> span() const { return span_; }
  const std::byte* data() const { return span_.data(); }
  size_t size() const { return span_.size(); }

 private:
  std::vector<std::byte> owned_;
  std::span<const std::byte> span_;
};

/// A mapping of a range of a file, unmapped when the MappedRange goes (a
/// view, for in-memory files). Only the pages read through it become
/// resident, and only while it lives. Guarded (mapping_guard.h): a file that
/// shrinks meanwhile reads as zeros where it lost bytes, and check_intact()
/// says so.
class MappedRange {
 public:
  MappedRange() = default;
  ~MappedRange();
  MappedRange(MappedRange&& other) noexcept;
  MappedRange& operator=(MappedRange&& other) noexcept;
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;

  std::span<const std::byte> span() const { return span_; }

  /// Throws Error(kIo) naming the file and range if a read of the span found
  /// the file shorter than when it was mapped: whatever was made of the
  /// bytes is to be dropped. Call it when done reading (also on errors:
  /// zeros read in place of lost bytes make parsers fail for the wrong reason).
  void check_intact() const;

 private:
  friend class InputFile;
  void unmap();
  void* mapping_ = nullptr;  // what munmap takes: page-aligned
  size_t mapped_size_ = 0;
  std::span<const std::byte> span_;
  MappingGuard guard_;
  std::string file_, what_;  // for check_intact's error
};

class InputFile {
 public:
  /// Opens `path`. Throws Error(kIo) naming the file on failure,
  /// Error(kNotCheckpoint) for directories and other non-regular files. A
  /// FIFO or device is refused without blocking (it is opened non-blocking
  /// and looked at before anything is read); a symbolic link is followed.
  static std::shared_ptr<const InputFile> open(const std::filesystem::path& path);

  /// An in-memory "file" (tests, and callers that already hold the bytes).
  static std::shared_ptr<const InputFile> from_memory(std::string bytes, std::string name);

  /// [offset, offset+length) of `whole` as a file of its own, for a file
  /// embedded in another (the torch.save zips inside a distributed
  /// checkpoint's .distcp files). It reads through `whole` and has no
  /// descriptor (fd() < 0), so byte offsets into it are never mistaken for
  /// offsets into `whole`. Throws Error(kCorrupt) naming `name` when the
  /// range is not inside `whole`.
  static std::shared_ptr<const InputFile> slice(std::shared_ptr<const InputFile> whole, uint64_t offset,
                                                uint64_t length, std::string name);

  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  /// The path as given, for messages.
  const std::string& name() const { return name_; }
  const std::filesystem::path& path() const { return path_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

  /// Which file this is, whatever name reached it (device and inode of an
  /// opened file; {0, 0} for in-memory files and slices): two names, links
  /// or paths of one file have the same identity.
  struct Identity {
    uint64_t device = 0;
    uint64_t inode = 0;
    bool operator==(const Identity&) const = default;
    bool operator<(const Identity& o) const { return device != o.device ? device < o.device : inode < o.inode; }
  };
  Identity identity() const { return {stamp_.device, stamp_.inode}; }
  /// The opened file as it was when opened (all zero for in-memory files and
  /// slices): a writer replacing it checks it still is (AtomicFile).
  const FileStamp& stamp() const { return stamp_; }

  /// True when the bytes are in memory (a small file read whole, an
  /// in-memory file, a slice of either): read_bytes makes no system call.
  bool in_memory() const { return base_ != nullptr; }

  /// Throws Error(kCorrupt) "<what> at <offset> extends past the end of the
  /// file" unless [offset, offset+length) is inside the file.
  void check_range(uint64_t offset, uint64_t length, std::string_view what) const;

  /// The bytes of [offset, offset+length) (check_range first): a view of an
  /// in-memory file, else read with pread into a buffer of their own. For
  /// the small structures ckptfix parses.
  FileBytes read_bytes(uint64_t offset, uint64_t length, std::string_view what) const;

  /// The first min(n, size()) bytes: signatures.
  FileBytes head(uint64_t n) const;

  /// A mapping of [offset, offset+length) (check_range first), unmapped when
  /// the result goes: for a pickle parsed where it lies, whose large
  /// payloads are never touched. A view for in-memory files.
  MappedRange map_range(uint64_t offset, uint64_t length, std::string_view what) const;

  /// Reads exactly out.size() bytes at offset (pread loop). Throws on short reads.
  void read(uint64_t offset, std::span<std::byte> out, std::string_view what) const;

  /// Tells the kernel a range will be read once, front to back.
  void advise_sequential(uint64_t offset, uint64_t length) const;

  /// A read-only mapping of the whole file, made on the first call and kept
  /// while the file lives: for zero-copy views a caller holds
  /// (Checkpoint::map_storage). Only the pages the caller reads come in.
  /// Null for empty files. Throws Error(kIo).
  const std::byte* shared_mapping() const;

  /// A private, copy-on-write mapping of the whole file, made once from the
  /// descriptor opened by open() (so it is the same file, whatever happened
  /// to its name since): writes to it change this process's memory only.
  /// Null for in-memory files and empty files. Throws Error(kIo).
  std::shared_ptr<std::byte> private_mapping() const;

 private:
  InputFile() = default;
  void read_fd(uint64_t offset, std::span<std::byte> out, std::string_view what) const;
  /// The bytes of an in-memory file (or a slice of one), else null.
  const std::byte* memory() const { return base_; }

  std::filesystem::path path_;
  std::string name_;
  int fd_ = -1;
  uint64_t size_ = 0;
  FileStamp stamp_;
  const std::byte* base_ = nullptr;  // in-memory files and slices of them
  std::string memory_;  // owns the bytes of an in-memory or small file
  std::shared_ptr<const InputFile> whole_;  // a slice's file, kept alive while the slice is
  uint64_t slice_offset_ = 0;               // where a slice starts in whole_
  mutable std::mutex mapping_mutex_;
  mutable const std::byte* shared_ = nullptr;  // shared_mapping(), made on request
  mutable std::weak_ptr<std::byte> private_;   // made on request; lives while someone uses it
};

}  // namespace ckptfix

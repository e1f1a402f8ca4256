// A read-only input file: mapped for the small structures ckptfix parses
// (zip directories, pickles), read with pread for the bulk tensor bytes.
//
// Why both: the mapping makes random access to headers and pickles simple
// and costs nothing until a page is touched; streaming gigabytes of tensor
// data through the mapping would leave every touched page resident in this
// process, so bulk data goes through pread into a small reused buffer (or
// the kernel copies it). Files of up to 8 MiB are simply read into memory.
#pragma once

#include <mutex>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace ckptfix {

class InputFile {
 public:
  /// Opens and maps `path`. Throws Error(kIo) naming the file on failure,
  /// Error(kNotCheckpoint) for directories and other non-regular files. A
  /// FIFO or device is refused without blocking (it is opened non-blocking
  /// and looked at before anything is read); a symbolic link is followed.
  static std::shared_ptr<const InputFile> open(const std::filesystem::path& path);

  /// An in-memory "file" (tests, and callers that already hold the bytes).
  static std::shared_ptr<const InputFile> from_memory(std::string bytes, std::string name);

  /// [offset, offset+length) of `whole` as a file of its own, for a file
  /// embedded in another (the torch.save zips inside a distributed
  /// checkpoint's .distcp files). It reads through `whole`'s mapping and has
  /// no descriptor (fd() < 0), so byte offsets into it are never mistaken
  /// for offsets into `whole`. Throws Error(kCorrupt) naming `name` when
  /// the range is not inside `whole`.
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
  Identity identity() const { return identity_; }

  /// A view of [offset, offset+length) of the mapping. Throws Error(kCorrupt)
  /// "<what> at <offset> extends past the end of the file" when out of range.
  std::span<const std::byte> view(uint64_t offset, uint64_t length, std::string_view what) const;

  /// Whole-file view (empty for an empty file).
  std::span<const std::byte> bytes() const { return {base_, static_cast<size_t>(size_)}; }

  /// Reads exactly out.size() bytes at offset (pread loop). Throws on short reads.
  void read(uint64_t offset, std::span<std::byte> out, std::string_view what) const;

  /// Tells the kernel a range will be read once, front to back.
  void advise_sequential(uint64_t offset, uint64_t length) const;

  /// A private, copy-on-write mapping of the whole file, made once from the
  /// descriptor opened by open() (so it is the same file, whatever happened
  /// to its name since): writes to it change this process's memory only.
  /// Null for in-memory files and empty files. Throws Error(kIo).
  std::shared_ptr<std::byte> private_mapping() const;

 private:
  InputFile() = default;
  void read_fd(uint64_t offset, std::span<std::byte> out, std::string_view what) const;

  std::filesystem::path path_;
  std::string name_;
  int fd_ = -1;
  uint64_t size_ = 0;
  Identity identity_;
  const std::byte* base_ = nullptr;
  std::string memory_;  // owns the bytes of an in-memory or small file
  std::shared_ptr<const InputFile> whole_;  // a slice's file, kept alive while the slice is
  mutable std::mutex private_mutex_;
  mutable std::weak_ptr<std::byte> private_;  // made on request; lives while someone uses it
};

}  // namespace ckptfix

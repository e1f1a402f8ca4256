// What tells that a file is still the one that was read: which file it is
// (device and inode) and when it last changed (size and status-change time:
// any write, truncation or rename of it moves ctime, and no program can set
// it back as it can the modification time).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>

namespace ckptfix {

struct FileStamp {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t changed_ns = 0;  ///< st_ctim
  bool same_file(const FileStamp& o) const { return device == o.device && inode == o.inode; }
  bool operator==(const FileStamp&) const = default;
};

/// The stamp of the file `st` describes (fstat of an open file).
FileStamp stamp_of(const struct stat& st);

/// The stamp of the file `path` names (links followed), or none if there is none.
std::optional<FileStamp> stamp_of(const std::filesystem::path& path);

}  // namespace ckptfix

// The record an output keeps of what it was made from (rerun.h): its
// text, and how a write puts it on the file it makes.
//
//   ckptfix-made-from 1
//   recipe <recipe_id>
//   input <the input's absolute path>
//   read <inode> <size> <ctime ns> <path>      one per input file, as it was when read
//   wrote <inode> <size> <mtime ns> <name>     one per file written, in the output's directory
//
// Paths are escaped (%XX for '%', spaces, control bytes and DEL), so each
// line splits at its spaces. The record is the extended attribute
// `user.ckptfix.made-from` of the output (of a set's last file).
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ckptfix/outputs.h"

namespace ckptfix {

/// The name of the extended attribute.
inline constexpr const char* kMadeFromAttribute = "user.ckptfix.made-from";

/// An input file as it was read.
struct ReadStamp {
  std::string path;  ///< absolute
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t changed_ns = 0;  ///< st_ctim
};

/// A file as it was written.
struct WroteStamp {
  std::string name;  ///< its file name, in the directory of the file holding the record
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t modified_ns = 0;  ///< st_mtim
};

/// The stamp of the file `st` describes, written as `name`.
WroteStamp wrote_stamp(const struct stat& st, std::string name);

struct MadeFromRecord {
  std::string recipe;
  std::string input;
  std::vector<ReadStamp> read;
  std::vector<WroteStamp> wrote;
};

/// The record's text.
std::string record_text(const MadeFromRecord& record);
/// The record a text holds, or none when it is not one.
std::optional<MadeFromRecord> parse_record(std::string_view text);

}  // namespace ckptfix

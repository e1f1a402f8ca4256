// Names an input gives for other files (a shard set's shards, a distributed
// checkpoint's .distcp files) are names in one directory, never paths: an
// input must not make ckptfix open files elsewhere.
#pragma once

#include <string_view>

namespace ckptfix {

/// True for a plain file name: not empty, not "." or "..", no '/', '\' or NUL.
inline bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
}

}  // namespace ckptfix

// The directories a run creates for its outputs (-o a/b/out.pt; --out-dir
// with --recursive), so that those a failure left empty are removed at the
// end: a failed write leaves no file behind, and no new directory either.
#pragma once

#include <filesystem>
#include <mutex>
#include <vector>

namespace ckptfix::cli {

class OutputDirectories {
 public:
  /// Creates `dir` and its missing parents (as create_directories does),
  /// remembering which this run made. Safe to call from several jobs.
  void create(const std::filesystem::path& dir);

  /// Removes each directory this run made that is empty now, deepest
  /// first. Called once every job is done: a directory that is empty while
  /// jobs run may be one another job is about to write into.
  void remove_empty();

 private:
  std::mutex mutex_;
  std::vector<std::filesystem::path> made_;
};

}  // namespace ckptfix::cli

#include "cli/output_directories.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>

namespace ckptfix::cli {

void OutputDirectories::create(const std::filesystem::path& dir) {
  // The missing ones, innermost first ("a/b/" names the directory "a/b").
  std::vector<std::filesystem::path> missing;
  for (std::filesystem::path p = dir.has_filename() ? dir : dir.parent_path();
       !p.empty() && !std::filesystem::exists(p); p = p.parent_path()) {
    missing.push_back(p);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    // false: another job made it first, and that job remembers it.
    if (std::filesystem::create_directory(*it)) {
      std::lock_guard<std::mutex> lock(mutex_);
      made_.push_back(*it);
    }
  }
}

void OutputDirectories::remove_empty() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Deepest first, whatever order the jobs made them in, so a parent is
  // empty by the time it is tried.
  std::stable_sort(made_.begin(), made_.end(), [](const auto& a, const auto& b) {
    return std::distance(a.begin(), a.end()) > std::distance(b.begin(), b.end());
  });
  for (const std::filesystem::path& dir : made_) ::rmdir(dir.c_str());  // fails, as it should, unless empty
  made_.clear();
}

}  // namespace ckptfix::cli

#include "cli/input_walk.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/passes.h"

namespace ckptfix::cli {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kDefaultGlobs = {"*.pt", "*.pth", "*.bin", "*.ckpt"};

bool matches(const std::vector<std::string>& globs, const std::string& name) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return glob_match(g, name); });
}

struct DirId {
  dev_t device;
  ino_t inode;
  bool operator<(const DirId& o) const { return device != o.device ? device < o.device : inode < o.inode; }
};

// `inner` is `outer` or below it (both canonical).
bool is_within(const fs::path& inner, const fs::path& outer) {
  const fs::path rel = inner.lexically_relative(outer);
  return !rel.empty() && *rel.begin() != "..";
}

// One directory argument's walk.
class Walk {
 public:
  Walk(const std::string& root, const std::vector<std::string>& globs, const std::string& exclude)
      : root_(root), globs_(globs) {
    std::error_code ec;
    root_real_ = fs::canonical(root, ec);
    if (!exclude.empty()) {
      struct stat st {};
      if (::stat(exclude.c_str(), &st) == 0) excluded_ = DirId{st.st_dev, st.st_ino};
    }
  }

  std::vector<Input> run() {
    struct stat st {};
    if (::stat(root_.c_str(), &st) == 0) entered_.insert({st.st_dev, st.st_ino});
    walk(root_, "");
    std::sort(found_.begin(), found_.end(), [](const Input& a, const Input& b) { return a.path < b.path; });
    return std::move(found_);
  }

 private:
  void walk(const fs::path& dir, const fs::path& relative) {
    std::error_code ec;
    fs::directory_iterator it(dir, ec);
    if (ec) return unreadable(dir, relative, ec);
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      const fs::path path = it->path();
      const fs::path rel = relative / path.filename();
      struct stat lst {};
      if (::lstat(path.c_str(), &lst) != 0) continue;  // gone meanwhile
      const bool link = S_ISLNK(lst.st_mode);
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0) {  // a link that leads nowhere, or to a loop of links
        if (link && matches(globs_, path.filename().string())) dangling(path, rel, errno);
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        directory(path, rel, st, link);
      } else if (matches(globs_, path.filename().string())) {
        found_.push_back({path.string(), rel.string(), ""});
      }
    }
    if (ec) unreadable(dir, relative, ec);
  }

  void directory(const fs::path& path, const fs::path& rel, const struct stat& st, bool link) {
    const DirId id{st.st_dev, st.st_ino};
    if (excluded_ && id.device == excluded_->device && id.inode == excluded_->inode) return;  // the outputs
    if (link) {
      // A link into the tree (its files are taken by their own names) or
      // to a directory above it (the walk would never end) is not followed.
      std::error_code ec;
      const fs::path target = fs::canonical(path, ec);
      if (ec || root_real_.empty() || is_within(target, root_real_) || is_within(root_real_, target)) return;
    }
    if (!entered_.insert(id).second) return;  // reached before, by another link
    if (is_checkpoint_directory(path)) {  // a distributed or DeepSpeed checkpoint: one input
      found_.push_back({path.string(), rel.string(), ""});
      return;
    }
    walk(path, rel);
  }

  void dangling(const fs::path& path, const fs::path& rel, int error) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(path, ec);
    found_.push_back({path.string(), rel.string(),
                      "is a symbolic link to '" + target.string() + "', which " +
                          (error == ELOOP ? std::string("is a loop of links") : "cannot be reached: " + std::string(std::strerror(error))),
                      ErrorKind::kIo});
  }

  void unreadable(const fs::path& dir, const fs::path& rel, const std::error_code& ec) {
    found_.push_back({dir.string(), rel.string(),
                      "is a directory that cannot be read (" + ec.message() + "): the checkpoints in it are not known",
                      ErrorKind::kIo});
  }

  fs::path root_;
  fs::path root_real_;
  const std::vector<std::string>& globs_;
  std::optional<DirId> excluded_;
  std::set<DirId> entered_;
  std::vector<Input> found_;
};

}  // namespace

std::vector<Input> expand_inputs(const InputArgs& args) {
  const std::vector<std::string>& globs = args.globs.empty() ? kDefaultGlobs : args.globs;
  std::vector<Input> out;
  if (!args.tag.empty() && (args.tag == "." || args.tag == ".." || args.tag.find('/') != std::string::npos)) {
    throw Error(ErrorKind::kInvalidArgument, "--tag '" + args.tag + "': a tag is the name of a directory in the "
                                             "checkpoint directory (what DeepSpeed's `latest` holds)");
  }
  if (!args.tag.empty() && args.recursive) {
    throw Error(ErrorKind::kInvalidArgument, "--tag names one tag of the checkpoint directories given, not of "
                                             "those --recursive finds");
  }
  for (const std::string& arg : args.inputs) {
    std::error_code ec;
    if (!args.tag.empty()) {
      // The tag directory, named for outputs after its checkpoint directory.
      const fs::path checkpoint = fs::path(arg).lexically_normal();
      std::string relative = checkpoint.filename().string();
      if (relative.empty()) relative = checkpoint.parent_path().filename().string();
      if (!fs::is_directory(arg, ec)) {
        out.push_back({arg, "", "--tag reads a tag of a DeepSpeed checkpoint directory, and this is no directory"});
      } else if (!fs::is_directory(checkpoint / args.tag, ec)) {
        out.push_back({arg, "", "has no tag directory '" + args.tag + "' (--tag)"});
      } else {
        out.push_back({(checkpoint / args.tag).string(), relative, ""});
      }
      continue;
    }
    // A distributed or DeepSpeed checkpoint directory is one checkpoint.
    if (!fs::is_directory(arg, ec) || is_checkpoint_directory(arg)) {
      out.push_back({arg, fs::path(arg).lexically_normal().filename().string(), ""});
      if (out.back().relative.empty()) out.back().relative = fs::path(arg).lexically_normal().parent_path().filename().string();
      continue;
    }
    if (!args.recursive) {
      out.push_back({arg, "", "is a directory; use --recursive to process the checkpoints under it"});
      continue;
    }
    std::vector<Input> found = Walk(arg, globs, args.exclude).run();
    if (found.empty()) {
      // Nothing to do is not success: a gate over a wrong or empty
      // directory must not pass silently.
      std::string names;
      for (const std::string& g : globs) names += (names.empty() ? "" : ", ") + g;
      out.push_back({arg, "", "no checkpoint found under this directory (files named " + names +
                                  ", or distributed or DeepSpeed checkpoint directories; --glob chooses other names)"});
      continue;
    }
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

}  // namespace ckptfix::cli

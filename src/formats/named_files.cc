#include "formats/named_files.h"

#include "ckptfix/error.h"
#include "io/file_names.h"

namespace ckptfix {

NamedFiles::NamedFiles(std::shared_ptr<const InputFile> namer, std::string kind)
    : namer_(std::move(namer)), kind_(std::move(kind)) {}

const std::shared_ptr<const InputFile>& NamedFiles::open(const std::string& name, const std::string& entry) {
  if (const auto it = by_name_.find(name); it != by_name_.end()) return it->second;
  const auto refuse = [&](ErrorKind kind, const std::string& why) {
    return Error(kind, "it names the " + kind_ + " '" + name + "', " + why).in_file(namer_->name()).at(entry);
  };
  if (!is_plain_file_name(name)) {
    throw refuse(ErrorKind::kUnsafe, "which is not a file name beside it (named files are never opened by path)");
  }
  const std::filesystem::path path = namer_->path().parent_path() / name;
  std::shared_ptr<const InputFile> file;
  try {
    file = InputFile::open(path);  // refuses what is not a regular file, without blocking
  } catch (Error& e) {
    throw e.at(entry).note("the " + kind_ + " '" + name + "' named by '" + namer_->name() + "'");
  }
  if (file->identity() == namer_->identity()) {
    throw refuse(ErrorKind::kCorrupt, "which is this file itself");
  }
  const auto [other, fresh] = name_of_.emplace(file->identity(), name);
  if (!fresh) {
    throw refuse(ErrorKind::kCorrupt, "which is the file it also names as '" + other->second +
                                          "' (two names for one file: a link)");
  }
  return by_name_.emplace(name, std::move(file)).first->second;
}

}  // namespace ckptfix

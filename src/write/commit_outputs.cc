#include "write/commit_outputs.h"

#include <sys/stat.h>
#include <sys/xattr.h>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "rerun/made_from.h"

namespace ckptfix {
namespace {

// The input files as they were read: the checkpoint's own file and the
// files of its set (shards, ranks); not slices of one (no descriptor).
std::vector<ReadStamp> read_stamps(const CheckpointImpl& input) {
  std::vector<ReadStamp> out;
  auto add = [&](const std::shared_ptr<const InputFile>& f) {
    if (!f || f->fd() < 0) return;
    out.push_back({std::filesystem::absolute(f->path()).lexically_normal().string(), f->stamp().inode,
                   f->stamp().size, f->stamp().changed_ns});
  };
  add(input.file);
  for (const auto& shard : input.shards) add(shard);
  return out;
}

}  // namespace

bool commit_outputs(const std::vector<AtomicFile*>& files, const CheckpointImpl& input, const OutputPolicy& policy,
                    bool sync) {
  if (files.empty()) return true;
  MadeFromRecord record;
  if (policy.made_from) {
    record.recipe = policy.made_from->recipe;
    record.input = std::filesystem::absolute(policy.made_from->input).lexically_normal().string();
    record.read = read_stamps(input);
    for (AtomicFile* f : files) {
      f->flush();  // the size and modification time are final once the last byte is written
      record.wrote.push_back(wrote_stamp(f->status(), f->target().filename().string()));
    }
    // Best effort: a file system without user attributes keeps none, and
    // a rerun then compares the bytes instead (rerun.h).
    files.back()->set_attribute(kMadeFromAttribute, record_text(record));
  }
  for (size_t i = 0; i + 1 < files.size(); ++i) files[i]->commit(sync);
  if (files.back()->commit(sync)) return true;
  // Kept as it was: the record describes the file there, for the next run.
  if (policy.made_from) {
    const std::filesystem::path& kept = files.back()->destination();
    struct stat st {};
    if (::stat(kept.c_str(), &st) == 0) {
      record.wrote.back() = wrote_stamp(st, kept.filename().string());
      const std::string text = record_text(record);
      ::setxattr(kept.c_str(), kMadeFromAttribute, text.data(), text.size(), 0);
    }
  }
  return false;
}

}  // namespace ckptfix

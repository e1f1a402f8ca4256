#include "write/replaced_input.h"

#include <system_error>

namespace ckptfix {
namespace {

bool same_path(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

}  // namespace

void guard_replaced_input(const CheckpointImpl& checkpoint, AtomicFile& out) {
  const std::optional<FileStamp> target = stamp_of(out.target());
  auto guard = [&](const InputFile& input) {
    if (input.fd() < 0) return;  // in memory: no file is replaced
    // The same file, or the same name (another file may already be there:
    // commit then refuses, as the input is no longer what is there).
    if ((target && input.stamp().same_file(*target)) || same_path(input.path(), out.target())) {
      out.replace_only_if_unchanged(input.stamp());
    }
  };
  if (checkpoint.file) guard(*checkpoint.file);
  for (const auto& shard : checkpoint.shards) guard(*shard);
}

}  // namespace ckptfix

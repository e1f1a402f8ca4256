// Checkpoint::open and Checkpoint::from_bytes: the entry from a path (or
// bytes) to the model, through the format registry: which file of a path
// is read, and by which reader (a directory's .metadata, a DeepSpeed tag's
// model states, any other file by its content); open_file.cc reads it.
// They live with the formats so that model/ knows nothing of any file format.
#include <cctype>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "error_boundary.h"
#include "formats/open_file.h"
#include "formats/registry.h"
#include "io/file_names.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

namespace {

// A torch.distributed.checkpoint is a directory; its `.metadata` file is
// what ckptfix opens (and may be named directly).
const char kDcpMetadata[] = ".metadata";

// A DeepSpeed checkpoint directory names its newest tag in `latest`
// (engine.save_checkpoint's save_latest): the tag directory to read.
std::filesystem::path latest_tag_directory(const std::filesystem::path& dir) {
  const std::filesystem::path latest = dir / "latest";
  const auto file = error_boundary(latest.string(), [&] { return InputFile::open(latest); });
  if (file->size() > 4096) {
    throw Error(ErrorKind::kCorrupt, "is " + std::to_string(file->size()) + " bytes, too long for the name of a tag")
        .in_file(latest.string());
  }
  const FileBytes bytes = file->read_bytes(0, file->size(), "tag");
  std::string tag(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
  while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.front()))) tag.erase(tag.begin());
  if (!is_plain_file_name(tag)) {
    throw Error(ErrorKind::kCorrupt, "does not name a tag directory beside it ('" + tag + "')").in_file(latest.string());
  }
  return dir / tag;
}

}  // namespace

Checkpoint Checkpoint::open(const std::filesystem::path& path, const OpenOptions& options) {
  return open_checkpoint(path, options, nullptr);
}

Checkpoint open_checkpoint(const std::filesystem::path& path, const OpenOptions& options, SalvageLog* salvage) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path metadata = path / kDcpMetadata;
    if (!std::filesystem::exists(metadata, ec)) {
      // A DeepSpeed checkpoint: its directory (with `latest`) or a tag directory.
      std::filesystem::path tag = path;
      if (!is_zero_tag_directory(tag) && std::filesystem::exists(path / "latest", ec)) {
        tag = latest_tag_directory(path);
        if (!is_zero_tag_directory(tag)) {
          throw Error(ErrorKind::kNotCheckpoint, "its `latest` names the tag '" + tag.filename().string() +
                                                     "', and that directory holds no DeepSpeed model states "
                                                     "(mp_rank_00_model_states.pt or zero_pp_rank_0_mp_rank_00_model_states.pt)")
              .in_file(path.string());
        }
      }
      if (is_zero_tag_directory(tag)) {
        const std::filesystem::path model = zero_model_states_file(tag);
        return open_one_file(error_boundary(model.string(), [&] { return InputFile::open(model); }), options,
                             read_zero_checkpoint, salvage);
      }
      throw Error(ErrorKind::kNotCheckpoint,
                  "is a directory with neither a .metadata file (a torch.distributed.checkpoint directory) nor "
                  "DeepSpeed's mp_rank_00_model_states.pt or a `latest` file (a ZeRO checkpoint)")
          .in_file(path.string());
    }
    return open_one_file(error_boundary(metadata.string(), [&] { return InputFile::open(metadata); }), options,
                         read_dcp_checkpoint, salvage);
  }
  return open_one_file(error_boundary(path.string(), [&] { return InputFile::open(path); }), options,
                       path.filename() == kDcpMetadata ? read_dcp_checkpoint : read_any_checkpoint, salvage);
}

Checkpoint open_written_checkpoint(const std::filesystem::path& path, const OpenOptions& options,
                                   PreparsedPickleSource preparsed) {
  return open_one_file(error_boundary(path.string(), [&] { return InputFile::open(path); }), options,
                       read_any_checkpoint, nullptr, false, std::move(preparsed));
}

bool is_checkpoint_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return false;
  if (std::filesystem::is_regular_file(dir / kDcpMetadata, ec) || is_zero_tag_directory(dir)) return true;
  // DeepSpeed's `latest`: opening the directory says what is wrong with it, if anything.
  return std::filesystem::is_regular_file(dir / "latest", ec);
}

Checkpoint Checkpoint::from_bytes(std::string bytes, std::string name, const OpenOptions& options) {
  return open_one_file(InputFile::from_memory(std::move(bytes), std::move(name)), options, read_any_checkpoint);
}

}  // namespace ckptfix

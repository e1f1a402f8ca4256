// Checkpoint::open and Checkpoint::from_bytes: the entry from bytes to the
// model, through the format registry. They live with the formats so that
// model/ knows nothing of any file format.
#include <cctype>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "error_boundary.h"
#include "formats/registry.h"
#include "io/file_names.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"

namespace ckptfix {

namespace {

// A torch.distributed.checkpoint is a directory; its `.metadata` file is
// what ckptfix opens (and may be named directly).
const char kDcpMetadata[] = ".metadata";

// How open_input reads its file.
enum class Reading { kAnyFormat, kDcpMetadata, kNamedFile, kZero };

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

Checkpoint open_input(std::shared_ptr<const InputFile> file, const OpenOptions& options, Reading reading,
                      std::string_view named_as = {}, SalvageLog* salvage = nullptr, bool gadgets_as_data = false,
                      PreparsedPickleSource preparsed = {}) {
  auto impl = std::make_unique<CheckpointImpl>();
  impl->file = std::move(file);
  impl->preparsed = std::move(preparsed);
  impl->gadgets_as_data = gadgets_as_data;
  impl->salvage = salvage;
  impl->limits = options.limits;
  impl->leave_payloads_in_file = options.leave_payloads_in_file;
  impl->make_values_ahead = options.make_values_ahead;
  const std::string name = impl->file->name();  // a copy: impl goes into the Checkpoint, which may not survive
  return error_boundary(name, [&] {
    switch (reading) {
      case Reading::kAnyFormat: read_any_checkpoint(*impl); break;
      case Reading::kDcpMetadata: read_dcp_checkpoint(*impl); break;
      case Reading::kNamedFile: read_named_checkpoint(*impl, named_as); break;
      case Reading::kZero: read_zero_checkpoint(*impl); break;
    }
    impl->salvage = nullptr;  // the log is the caller's, and reading is done
    Checkpoint checkpoint = CheckpointAccess::adopt(std::move(impl));
    validate_tensor_views(checkpoint);
    return checkpoint;
  });
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
        return open_input(error_boundary(model.string(), [&] { return InputFile::open(model); }), options,
                          Reading::kZero, {}, salvage);
      }
      throw Error(ErrorKind::kNotCheckpoint,
                  "is a directory with neither a .metadata file (a torch.distributed.checkpoint directory) nor "
                  "DeepSpeed's mp_rank_00_model_states.pt or a `latest` file (a ZeRO checkpoint)")
          .in_file(path.string());
    }
    return open_input(error_boundary(metadata.string(), [&] { return InputFile::open(metadata); }), options,
                      Reading::kDcpMetadata, {}, salvage);
  }
  const Reading reading = path.filename() == kDcpMetadata ? Reading::kDcpMetadata : Reading::kAnyFormat;
  return open_input(error_boundary(path.string(), [&] { return InputFile::open(path); }), options, reading, {},
                    salvage);
}

Checkpoint open_written_checkpoint(const std::filesystem::path& path, const OpenOptions& options,
                                   PreparsedPickleSource preparsed) {
  return open_input(error_boundary(path.string(), [&] { return InputFile::open(path); }), options,
                    Reading::kAnyFormat, {}, nullptr, false, std::move(preparsed));
}

bool is_checkpoint_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return false;
  if (std::filesystem::is_regular_file(dir / kDcpMetadata, ec) || is_zero_tag_directory(dir)) return true;
  // DeepSpeed's `latest`: opening the directory says what is wrong with it, if anything.
  return std::filesystem::is_regular_file(dir / "latest", ec);
}

Checkpoint Checkpoint::from_bytes(std::string bytes, std::string name, const OpenOptions& options) {
  return open_input(InputFile::from_memory(std::move(bytes), std::move(name)), options, Reading::kAnyFormat);
}

Checkpoint open_named_file(std::shared_ptr<const InputFile> file, std::string_view kind, const OpenOptions& options,
                           SalvageLog* salvage) {
  return open_input(std::move(file), options, Reading::kNamedFile, kind, salvage);
}

Checkpoint open_data_file(std::shared_ptr<const InputFile> file, std::string_view kind, const OpenOptions& options) {
  return open_input(std::move(file), options, Reading::kNamedFile, kind, nullptr, true);
}

}  // namespace ckptfix

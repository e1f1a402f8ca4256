// Checkpoint::open and Checkpoint::from_bytes: the entry from bytes to the
// model, through the format registry. They live with the formats so that
// model/ knows nothing of any file format.
#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "error_boundary.h"
#include "formats/registry.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"

namespace ckptfix {

namespace {

// A torch.distributed.checkpoint is a directory; its `.metadata` file is
// what ckptfix opens (and may be named directly).
const char kDcpMetadata[] = ".metadata";

// How open_input reads its file.
enum class Reading { kAnyFormat, kDcpMetadata, kNamedFile };

Checkpoint open_input(std::shared_ptr<const InputFile> file, const OpenOptions& options, Reading reading,
                      std::string_view named_as = {}, SalvageLog* salvage = nullptr) {
  auto impl = std::make_unique<CheckpointImpl>();
  impl->file = std::move(file);
  impl->salvage = salvage;
  impl->limits = options.limits;
  impl->leave_payloads_in_file = options.leave_payloads_in_file;
  const std::string name = impl->file->name();  // a copy: impl goes into the Checkpoint, which may not survive
  return error_boundary(name, [&] {
    switch (reading) {
      case Reading::kAnyFormat: read_any_checkpoint(*impl); break;
      case Reading::kDcpMetadata: read_dcp_checkpoint(*impl); break;
      case Reading::kNamedFile: read_named_checkpoint(*impl, named_as); break;
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
      throw Error(ErrorKind::kNotCheckpoint,
                  "is a directory without a .metadata file, so not a torch.distributed.checkpoint directory")
          .in_file(path.string());
    }
    return open_input(error_boundary(metadata.string(), [&] { return InputFile::open(metadata); }), options,
                      Reading::kDcpMetadata, {}, salvage);
  }
  const Reading reading = path.filename() == kDcpMetadata ? Reading::kDcpMetadata : Reading::kAnyFormat;
  return open_input(error_boundary(path.string(), [&] { return InputFile::open(path); }), options, reading, {},
                    salvage);
}

Checkpoint Checkpoint::from_bytes(std::string bytes, std::string name, const OpenOptions& options) {
  return open_input(InputFile::from_memory(std::move(bytes), std::move(name)), options, Reading::kAnyFormat);
}

Checkpoint open_named_file(std::shared_ptr<const InputFile> file, std::string_view kind, const OpenOptions& options,
                           SalvageLog* salvage) {
  return open_input(std::move(file), options, Reading::kNamedFile, kind, salvage);
}

}  // namespace ckptfix

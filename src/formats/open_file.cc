// Opening one file into the model: the reading of a file by a reader of
// the registry, inside the error boundary that names the file, and the
// opener of the files another names (a shard set's shards, a rank's file).
// Checkpoint::open (open.cc) stands above it: it decides, for a path, which
// file to open and how (a directory's .metadata, a DeepSpeed tag's model
// states), and the readers that name files call only this one, so no two
// files here call each other.
#include "formats/open_file.h"

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "error_boundary.h"
#include "formats/registry.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"

namespace ckptfix {

Checkpoint open_one_file(std::shared_ptr<const InputFile> file, const OpenOptions& options,
                         const std::function<void(CheckpointImpl&)>& read, SalvageLog* salvage, bool gadgets_as_data,
                         PreparsedPickleSource preparsed) {
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
    read(*impl);
    impl->salvage = nullptr;  // the log is the caller's, and reading is done
    Checkpoint checkpoint = CheckpointAccess::adopt(std::move(impl));
    validate_tensor_views(checkpoint);
    return checkpoint;
  });
}

Checkpoint open_named_file(std::shared_ptr<const InputFile> file, std::string_view kind, const OpenOptions& options,
                           SalvageLog* salvage) {
  return open_one_file(std::move(file), options, [&](CheckpointImpl& impl) { read_named_checkpoint(impl, kind); },
                       salvage);
}

Checkpoint open_data_file(std::shared_ptr<const InputFile> file, std::string_view kind, const OpenOptions& options) {
  return open_one_file(std::move(file), options, [&](CheckpointImpl& impl) { read_named_checkpoint(impl, kind); },
                       nullptr, true);
}

}  // namespace ckptfix

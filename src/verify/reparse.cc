#include "verify/reparse.h"

#include "formats/registry.h"
#include "model/checkpoint_impl.h"
#include "verify/torch_offsets.h"

namespace ckptfix {

Checkpoint reparse(const std::filesystem::path& path, const OpenOptions& open,
                   PreparsedPickleSource preparsed) {
  Checkpoint checkpoint =
      preparsed ? open_written_checkpoint(path, open, std::move(preparsed)) : Checkpoint::open(path, open);
  if (impl_of(checkpoint).zip) check_torch_computed_offsets(checkpoint, *impl_of(checkpoint).zip);
  return checkpoint;
}

}  // namespace ckptfix

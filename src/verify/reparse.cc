#include "verify/reparse.h"

#include "model/checkpoint_impl.h"
#include "verify/torch_offsets.h"

namespace ckptfix {

Checkpoint reparse(const std::filesystem::path& path, const OpenOptions& open) {
  Checkpoint checkpoint = Checkpoint::open(path, open);
  if (checkpoint.impl().zip) check_torch_computed_offsets(checkpoint, *checkpoint.impl().zip);
  return checkpoint;
}

}  // namespace ckptfix

// The format readers: each fills a Checkpoint::Impl from one kind of file.
#pragma once

#include <memory>

#include "model/checkpoint_impl.h"

namespace ckptfix {

/// torch >= 1.6 zip checkpoints.
void read_zip_checkpoint(Checkpoint::Impl& impl);

/// torch < 1.6 stream checkpoints (five pickles, then raw storage data).
void read_legacy_checkpoint(Checkpoint::Impl& impl);

/// Decides what the file is and dispatches; refuses TorchScript archives,
/// the tar format and files that are not checkpoints with a hint.
void read_any_checkpoint(Checkpoint::Impl& impl);

}  // namespace ckptfix

// Reading a damaged torch zip checkpoint for salvage (include/ckptfix/salvage.h).
#pragma once

#include "model/checkpoint_impl.h"

namespace ckptfix {

/// read_zip_checkpoint for a file that may be cut or damaged (impl.salvage
/// set): the records are found from the central directory or, when that is
/// lost, from their local headers; data.pkl must be intact (else
/// Error(kCorrupt): nothing can be recovered); every storage whose record is
/// missing, cut, of the wrong size or fails its CRC-32 is logged as lost and
/// the tensors over it are pruned from the graph.
void salvage_zip_checkpoint(CheckpointImpl& impl);

}  // namespace ckptfix

// Taking the tensors whose storage is lost out of a damaged checkpoint's
// graph (salvage): each tensor over a lost storage (its rebuild call, and a
// Parameter or subclass rebuilt from it) is removed from the dict that holds
// it, and becomes None anywhere else (a list, a tuple, an object's
// arguments); its storage's persistent id goes too, so the storage table is
// built from the storages that are there.
#pragma once

#include "model/checkpoint_impl.h"

namespace ckptfix {

/// Prunes by impl.salvage->lost_storages (key -> reason), logging each lost
/// tensor with its path into impl.salvage->lost. Before build_storage_table.
void prune_lost_tensors(CheckpointImpl& impl);

}  // namespace ckptfix

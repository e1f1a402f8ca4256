// The step both verifications end with: the file parsed as any input is
// (safely, within `open`'s limits), and, where it promises `.format_version`,
// every storage where torch >= 2.7 computes it.
#pragma once

#include <filesystem>

#include "model/checkpoint_impl.h"

namespace ckptfix {

/// Throws what Checkpoint::open throws, or Error(kCorrupt) from
/// check_torch_computed_offsets.
Checkpoint reparse(const std::filesystem::path& path, const OpenOptions& open);

}  // namespace ckptfix

// The step both verifications end with: the file parsed as any input is
// (safely, within `open`'s limits), and, where it promises `.format_version`,
// every storage where torch >= 2.7 computes it.
#pragma once

#include <filesystem>
#include <memory>

#include "model/checkpoint_impl.h"

namespace ckptfix {

/// Throws what Checkpoint::open throws, or Error(kCorrupt) from
/// check_torch_computed_offsets. `preparsed`: the file's data.pkl as a save
/// parsed it while writing the rest (model/preparsed_pickle.h), asked for
/// once the archive's directory is read, and taken
/// where the file holds that very record.
Checkpoint reparse(const std::filesystem::path& path, const OpenOptions& open,
                   PreparsedPickleSource preparsed = {});

}  // namespace ckptfix

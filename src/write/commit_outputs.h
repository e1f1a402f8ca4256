// The end of every write: recording on its files what they were made from
// (OutputPolicy::made_from, rerun.h), then renaming them into place.
#pragma once

#include <vector>

#include "ckptfix/outputs.h"
#include "io/atomic_file.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

/// Renames `files` into place in order, the last one last (a set is
/// complete once its index or .metadata is there), after recording on the
/// last what they were made from: `input`'s files as they were when read,
/// every file of `files` as written. Returns false when the one file was
/// not renamed because the output already there holds the same bytes
/// (OutputPolicy::keep_identical): the record is then set on that file.
bool commit_outputs(const std::vector<AtomicFile*>& files, const CheckpointImpl& input, const OutputPolicy& policy,
                    bool sync);

}  // namespace ckptfix

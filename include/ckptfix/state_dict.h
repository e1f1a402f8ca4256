// Picking the state dict a loader wants out of a checkpoint: the root when
// it is one, the only one there is, or the one at a given path.
#pragma once

#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// One entry of a state dict: its key and the tensor it holds.
struct StateDictEntry {
  std::string key;
  size_t tensor = 0;  ///< index into Checkpoint::tensors()
  Value* dict = nullptr;  ///< the dict value it belongs to
};

/// The entries, in the file's order, of the state dict at `key` (a
/// '/'-separated path such as "state_dict" or "model/ema"), or, when `key` is
/// empty, of the root if it is a state dict, else of the only state dict
/// outside optimizer states. Throws Error(kConflict) when there is none,
/// several (naming them), or the value at `key` is not a dict of tensors.
std::vector<StateDictEntry> select_state_dict(const Checkpoint& checkpoint, const std::string& key = {});

}  // namespace ckptfix

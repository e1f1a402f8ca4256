// Picking the state dict a loader wants out of a checkpoint: the root when
// it is one, the only one there is, or the one at a given path.
#pragma once

#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// One entry of a state dict: its key and the tensor it holds.
struct StateDictEntry {
  std::string key;     ///< the key, as the file spells it
  size_t tensor = 0;   ///< index into Checkpoint::tensors()
};

/// The entries, in the file's order, of the state dict at `key` (a
/// '/'-separated path such as "state_dict" or "model/ema"), or, when `key` is
/// empty, of the root if it is a state dict, else of the only state dict
/// outside optimizer states. Throws Error(kInvalidArgument) when `key`
/// names nothing or something that is not a dict, Error(kConflict) when
/// there is no state dict, several (naming them), or the dict at `key` holds
/// something other than tensors.
std::vector<StateDictEntry> select_state_dict(const Checkpoint& checkpoint, const std::string& key = {});

}  // namespace ckptfix

// Which parts of a checkpoint a pass edits.
//
// Without --key: every state dict reachable from the root except those inside
// an optimizer state. With --key PATH...: exactly the dicts at those paths
// (any dict, optimizer states included), and for tensor passes every tensor
// reachable from them.
#pragma once

#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

struct TargetDict {
  Path path;
  Value* dict = nullptr;
};

/// A tensor a pass may edit, and the key it is known by for messages and
/// --keep globs (the dict key, or the path below a --key dict).
struct TargetTensor {
  size_t tensor = 0;
  std::string key;
  std::string where;  ///< full path, for messages
};

/// The value at a '/'-separated path, or nullptr.
Value* find_path(const Checkpoint& checkpoint, const std::string& path, Path* found_path = nullptr);

/// The dicts to edit. Throws Error(kConflict) when a --key path names
/// nothing or something that is not a dict.
std::vector<TargetDict> select_dicts(const Checkpoint& checkpoint, const std::vector<std::string>& keys);

/// The tensors inside the selected dicts (each tensor once, first position wins).
std::vector<TargetTensor> select_tensors(const Checkpoint& checkpoint, const std::vector<TargetDict>& dicts);

/// For messages: every tensor's first position path ("state_dict/fc.weight").
std::vector<std::string> tensor_names(const Checkpoint& checkpoint);

}  // namespace ckptfix

// Choosing dicts and tensors of a checkpoint by path: the one set of rules
// for the passes (which edit dicts), select_state_dict (which hands one state
// dict to a loader) and the commands that report on state dicts.
//
// Without keys: every state dict reachable from the root except those inside
// an optimizer state (the root alone when it is one). With keys (paths):
// exactly the dicts at those paths (any dict, optimizer states included),
// and for tensor passes every tensor reachable from them.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ckptfix/state_dict.h"
#include "model/checkpoint_impl.h"

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
Value* find_path(const CheckpointImpl& checkpoint, const std::string& path, Path* found_path = nullptr);

/// The state dicts chosen when no key is given: the root when it is one,
/// else every state dict outside optimizer states.
std::vector<StateDict> default_state_dicts(const CheckpointImpl& checkpoint);

/// The dicts at `keys`, or default_state_dicts() when there are none.
/// Throws Error(kInvalidArgument) when a key names nothing or something
/// that is not a dict.
std::vector<TargetDict> select_dicts(const CheckpointImpl& checkpoint, const std::vector<std::string>& keys);

/// Whether select_tensors goes into the values of `_extra_state` keys.
enum class ExtraStates {
  kSkip,     ///< for the passes that change values (a cast): a module's extra state is carried as data
  kInclude,  ///< for those that place bytes (a retag): its tensors must load where the others do
};

/// The tensors inside the selected dicts (each tensor once, first position wins).
std::vector<TargetTensor> select_tensors(const CheckpointImpl& checkpoint, const std::vector<TargetDict>& dicts,
                                         ExtraStates extra_states = ExtraStates::kInclude);

/// The entries of the root when it is a state dict (an empty dict counts:
/// an empty safetensors file reads as one), else nullopt: what a format
/// holding exactly one state dict (safetensors, a shard) takes.
std::optional<std::vector<StateDictEntry>> root_state_dict_entries(const Checkpoint& checkpoint);

/// For messages: every tensor's first position path ("state_dict/fc.weight").
std::vector<std::string> tensor_names(const Checkpoint& checkpoint);

}  // namespace ckptfix

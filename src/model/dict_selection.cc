#include "model/dict_selection.h"

#include <unordered_set>

#include "ckptfix/error.h"
#include "model/graph_walk.h"
#include "model/state_dict_values.h"

namespace ckptfix {

Value* find_path(const CheckpointImpl& checkpoint, const std::string& path, Path* found_path) {
  std::string wanted = path;
  while (!wanted.empty() && wanted.back() == '/') wanted.pop_back();
  Value* found = nullptr;
  walk_checkpoint(checkpoint, checkpoint.root, [&](Value& v, const Path& here_path) {
    if (found != nullptr) return false;
    const std::string here = path_to_string(here_path);
    if (here == wanted) {
      found = &v;
      if (found_path != nullptr) *found_path = here_path;
      return false;
    }
    // Only descend where the wanted path continues.
    return wanted.empty() || here.empty() || wanted.compare(0, here.size() + 1, here + "/") == 0;
  });
  return found;
}

std::vector<StateDict> default_state_dicts(const CheckpointImpl& checkpoint) {
  std::vector<StateDict> out;
  for (StateDict& sd : checkpoint.state_dicts()) {
    if (!sd.in_optimizer) out.push_back(std::move(sd));
  }
  return out;
}

std::vector<TargetDict> select_dicts(const CheckpointImpl& checkpoint, const std::vector<std::string>& keys) {
  std::vector<TargetDict> out;
  if (keys.empty()) {
    for (const StateDict& sd : default_state_dicts(checkpoint)) out.push_back({sd.path, sd.dict});
    return out;
  }
  for (const std::string& key : keys) {
    Path found_path;
    Value* found = find_path(checkpoint, key, &found_path);
    if (found == nullptr) {
      throw Error(ErrorKind::kInvalidArgument, "key path '" + key + "' names nothing in this checkpoint");
    }
    if (!is_dict_like(*found)) {
      throw Error(ErrorKind::kInvalidArgument, "key path '" + key + "' names a value that is not a dict");
    }
    out.push_back({found_path, found});
  }
  return out;
}

std::vector<TargetTensor> select_tensors(const CheckpointImpl& checkpoint, const std::vector<TargetDict>& dicts,
                                         ExtraStates extra_states) {
  std::vector<TargetTensor> out;
  std::unordered_set<size_t> seen;
  for (const TargetDict& d : dicts) {
    walk_checkpoint(checkpoint, d.dict, [&](Value& v, const Path& path) {
      if (extra_states == ExtraStates::kSkip && !path.empty()) {
        const auto* key = std::get_if<std::string>(&path.back());
        if (key != nullptr && is_extra_state_key(*key)) return false;
      }
      const Tensor* t = checkpoint.tensor_of(&v);
      if (t == nullptr) return true;
      const size_t index = static_cast<size_t>(t - checkpoint.tensors.data());
      if (seen.insert(index).second) {
        Path full = d.path;
        full.insert(full.end(), path.begin(), path.end());
        out.push_back({index, path_to_string(path), path_to_string(full)});
      }
      return false;
    });
  }
  return out;
}

std::vector<std::string> tensor_names(const Checkpoint& checkpoint) {
  std::vector<std::string> names(impl_of(checkpoint).tensors.size());
  for (const TensorPosition& p : checkpoint.tensor_positions()) {
    if (names[p.tensor].empty()) names[p.tensor] = p.path.empty() ? "<root>" : path_to_string(p.path);
  }
  return names;
}

}  // namespace ckptfix

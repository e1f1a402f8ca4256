#include "ckptfix/state_dict.h"

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "model/graph_walk.h"
#include "passes/targets.h"

namespace ckptfix {

namespace {

std::vector<StateDictEntry> find_state_dict(const Checkpoint& checkpoint, const std::string& key) {
  Value* dict = nullptr;
  std::string name = key.empty() ? "<root>" : key;
  if (!key.empty()) {
    dict = find_path(checkpoint, key);
    if (dict == nullptr) throw Error(ErrorKind::kConflict, "key '" + key + "' names nothing in this checkpoint");
  } else {
    std::vector<StateDictEntry> none;
    const auto found = checkpoint.state_dicts();
    std::vector<const StateDict*> candidates;
    for (const StateDict& sd : found) {
      if (sd.path.empty()) {  // the root itself
        candidates = {&sd};
        break;
      }
      if (!sd.in_optimizer) candidates.push_back(&sd);
    }
    if (candidates.empty()) throw Error(ErrorKind::kConflict, "the checkpoint holds no state dict");
    if (candidates.size() > 1) {
      std::string names;
      for (const StateDict* sd : candidates) names += (names.empty() ? "'" : ", '") + path_to_string(sd->path) + "'";
      throw Error(ErrorKind::kConflict, "the checkpoint holds several state dicts (" + names + "); choose one by its key");
    }
    dict = candidates.front()->dict;
    if (!candidates.front()->path.empty()) name = path_to_string(candidates.front()->path);
  }
  if (!is_dict_like(*dict)) throw Error(ErrorKind::kConflict, "'" + name + "' is not a dict");
  std::vector<StateDictEntry> entries;
  for (const auto& [k, v] : dict->entries()) {
    const Tensor* t = checkpoint.tensor_of(v);
    if (!k->is_str() || t == nullptr) {
      throw Error(ErrorKind::kConflict, "'" + name + "' is not a state dict: its entry '" +
                                            path_to_string({key_to_path_element(*k)}) + "' is not a tensor");
    }
    entries.push_back({k->text, static_cast<size_t>(t - checkpoint.tensors().data()), dict});
  }
  return entries;
}

}  // namespace

std::vector<StateDictEntry> select_state_dict(const Checkpoint& checkpoint, const std::string& key) {
  return error_boundary(checkpoint.file_name(), [&] { return find_state_dict(checkpoint, key); });
}

}  // namespace ckptfix

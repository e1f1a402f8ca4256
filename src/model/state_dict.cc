#include "ckptfix/state_dict.h"

#include <algorithm>

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "model/graph_walk.h"
#include "model/checkpoint_impl.h"
#include "model/dict_selection.h"
#include "model/payloads.h"

namespace ckptfix {

namespace {

std::vector<StateDictEntry> find_state_dict(const CheckpointImpl& checkpoint, const std::string& key) {
  std::string name = key.empty() ? "<root>" : key;
  const Value* dict = nullptr;
  if (!key.empty()) {
    dict = select_dicts(checkpoint, {key}).front().dict;
  } else {
    const std::vector<StateDict> candidates = default_state_dicts(checkpoint);
    if (candidates.empty()) throw Error(ErrorKind::kConflict, "the checkpoint holds no state dict");
    if (candidates.size() > 1) {
      std::string names;
      for (const StateDict& sd : candidates) names += (names.empty() ? "'" : ", '") + path_to_string(sd.path) + "'";
      throw Error(ErrorKind::kConflict, "the checkpoint holds several state dicts (" + names + "); choose one by its key");
    }
    dict = candidates.front().dict;
    if (!candidates.front().path.empty()) name = path_to_string(candidates.front().path);
  }
  std::vector<StateDictEntry> entries;
  for (const auto& [k, v] : dict->entries()) {
    const Tensor* t = checkpoint.tensor_of(v);
    if (!k->is_str() || t == nullptr) {
      throw Error(ErrorKind::kConflict, "'" + name + "' is not a state dict: its entry '" +
                                            path_to_string({key_to_path_element(*k)}) + "' is not a tensor");
    }
    entries.push_back({k->text, static_cast<size_t>(t - checkpoint.tensors.data())});
  }
  return entries;
}

}  // namespace

std::optional<std::vector<StateDictEntry>> root_state_dict_entries(const Checkpoint& checkpoint) {
  const CheckpointImpl& impl = impl_of(checkpoint);
  if (is_dict_like(*impl.root) && impl.root->entries().empty()) return std::vector<StateDictEntry>{};
  const auto dicts = impl.state_dicts();
  if (std::none_of(dicts.begin(), dicts.end(), [](const StateDict& d) { return d.path.empty(); })) return std::nullopt;
  return select_state_dict(checkpoint);
}

std::vector<StateDictEntry> select_state_dict(const Checkpoint& checkpoint, const std::string& key) {
  return error_boundary(checkpoint.file_name(), [&] {
    read_in_left_payloads(checkpoint);  // keys are read from `text`
    return find_state_dict(impl_of(checkpoint), key);
  });
}

}  // namespace ckptfix

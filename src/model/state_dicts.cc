// Which dicts of a checkpoint are state dicts (CheckpointImpl::state_dicts,
// Checkpoint::state_dicts): the walk of graph_walk.cc, judged by the rules
// of state_dict_values.h, so that the walk itself knows no state dict.
#include <algorithm>
#include <vector>

#include "error_boundary.h"
#include "model/checkpoint_impl.h"
#include "model/graph_walk.h"
#include "model/state_dict_values.h"

namespace ckptfix {

namespace {

std::vector<StateDict> find_state_dicts(const CheckpointImpl& checkpoint) {
  const CheckpointImpl* impl_ = &checkpoint;
  std::vector<StateDict> out;
  // walk_graph has no "leave" callback; track optimizer nesting by path prefix.
  std::vector<Path> optimizer_paths;
  walk_checkpoint(checkpoint, impl_->root, [&](Value& v, const Path& path) {
    while (!optimizer_paths.empty()) {
      const Path& p = optimizer_paths.back();
      if (path.size() > p.size() && std::equal(p.begin(), p.end(), path.begin())) break;
      optimizer_paths.pop_back();
    }
    if (impl_->tensor_by_value.count(&v)) return false;
    if (!is_dict_like(v)) return true;
    if (is_optimizer_state(v)) {
      optimizer_paths.push_back(path);
      return true;
    }
    if (state_dict_problem(checkpoint, v)) return true;
    StateDict found;
    found.path = path;
    found.dict = &v;
    found.in_optimizer = !optimizer_paths.empty();
    found.size = v.entries().size();
    found.keys.reserve(found.size);
    for (const auto& [k, val] : v.entries()) {
      found.keys.push_back(k->text);
      const EntryKind kind = entry_kind(checkpoint, *k, *val);
      found.sparse_tensors += kind == EntryKind::kSparse;
      found.extra_states += kind == EntryKind::kExtraState;
    }
    out.push_back(std::move(found));
    return false;
  });
  return out;
}

}  // namespace

std::vector<StateDict> CheckpointImpl::state_dicts() const {
  return error_boundary(file->name(), [&] { return find_state_dicts(*this); });
}

std::vector<StateDictInfo> Checkpoint::state_dicts() const {
  std::vector<StateDictInfo> out;
  for (StateDict& d : impl_->state_dicts()) out.push_back(std::move(d));
  return out;
}

}  // namespace ckptfix

// Casting floating tensors. A storage is converted as a whole, once, so
// views keep their offsets and strides and tied weights stay tied. It is
// converted only when every tensor that uses it (anywhere in the file) is
// selected for the cast; otherwise converting it would change a tensor the
// user did not ask to change (a --keep match, an optimizer buffer, another
// dtype's view), so the storage keeps its type and a warning names the keys.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "passes/passes_internal.h"

namespace ckptfix {

void plan_cast(Checkpoint& checkpoint, const std::vector<TargetTensor>& targets, const PassOptions& options,
               PassReport& report) {
  const DType to = *options.cast_to;
  auto& tensors = checkpoint.tensors();
  auto& storages = checkpoint.storages();
  auto wanted_type = [&](DType d) {
    if (!is_castable_float(d) || d == to) return false;
    return options.cast_from.empty() ||
           std::find(options.cast_from.begin(), options.cast_from.end(), d) != options.cast_from.end();
  };

  std::unordered_set<size_t> selected;
  for (const TargetTensor& target : targets) {
    const Tensor& t = tensors[target.tensor];
    if (t.kind != TensorKind::kDense || !wanted_type(t.dtype)) continue;
    const bool keep = std::any_of(options.keep.begin(), options.keep.end(),
                                  [&](const std::string& g) { return glob_match(g, target.key); });
    if (keep) {
      ++report.tensors_kept;
      continue;
    }
    selected.insert(target.tensor);
  }

  std::unordered_map<int32_t, std::vector<size_t>> users;  // storage -> every tensor using it
  for (size_t i = 0; i < tensors.size(); ++i) users[tensors[i].storage].push_back(i);

  const std::vector<std::string> names = tensor_names(checkpoint);
  std::unordered_set<int32_t> decided;
  for (size_t index : selected) {
    const int32_t storage = tensors[index].storage;
    if (!decided.insert(storage).second) continue;
    const auto& all = users[storage];
    const bool whole = std::all_of(all.begin(), all.end(), [&](size_t u) { return selected.count(u) != 0; });
    Storage& s = storages[static_cast<size_t>(storage)];
    if (!whole) {
      std::string cast_keys, other_keys;
      for (size_t u : all) {
        std::string& list = selected.count(u) ? cast_keys : other_keys;
        list += (list.empty() ? "'" : ", '") + names[u] + "'";
      }
      report.warnings.push_back("storage '" + s.key + "' is shared by " + cast_keys + " (selected) and " + other_keys +
                                " (not selected), so it keeps its type " + std::string(dtype_name(s.dtype)));
      continue;
    }
    report.cast_bytes_before += s.nbytes;
    s.cast_to = to;
    report.cast_bytes_after += s.output_nbytes();
    ++report.storages_cast;
    for (size_t u : all) {
      Tensor& t = tensors[u];
      t.dtype = to;
      ++report.tensors_cast;
      if (t.dtype_arg != nullptr) {
        // The dtype Global may be memo-shared with other tensors: replace, never mutate.
        Value* dtype = checkpoint.graph().make_global("torch", std::string(dtype_name(to)));
        for (Value*& arg : t.rebuild->args()->items) {
          if (arg == t.dtype_arg) arg = dtype;
        }
        t.dtype_arg = dtype;
      }
    }
  }
}

}  // namespace ckptfix

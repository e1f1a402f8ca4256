// Casting floating tensors. A storage is converted as a whole, once, so
// views keep their offsets and strides and tied weights stay tied. It is
// converted only when every tensor that uses it (anywhere in the file) is
// selected for the cast; otherwise converting it would change a tensor the
// user did not ask to change (a --keep match, an optimizer buffer, another
// dtype's view), so the storage keeps its type and a warning names the keys.
//
// float8 types have no typed storage class. torch >= 2.1 saves their
// tensors as _rebuild_tensor_v3(storage, offset, size, stride,
// requires_grad, backward_hooks, dtype[, metadata]) over a
// torch.UntypedStorage, and so does a cast to float8: the tensors' rebuild
// calls gain the dtype argument and the storage is written untyped. Tensors
// already rebuilt by _rebuild_tensor_v3 (a float8 source) keep that form
// with the new dtype.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "passes/passes_internal.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"

namespace ckptfix {
namespace {

// Rebuilds `t` with _rebuild_tensor_v3 and `dtype`. Values the pickle may
// share (memo) with other tensors, such as the args tuple's items or the
// callable, are replaced, never mutated.
void rebuild_with_dtype(Checkpoint& checkpoint, Tensor& t, Value* v3, Value* dtype) {
  ValueGraph& graph = impl_of(checkpoint).graph;
  const std::vector<Value*>& a = rebuild_arguments(t);
  std::vector<Value*> args;
  if (t.dtype_arg != nullptr) {  // already v3: swap the dtype
    args = a;
    for (Value*& arg : args) {
      if (arg == t.dtype_arg) arg = dtype;
    }
  } else if (rebuild_function(t).name() == "_rebuild_tensor_v2") {
    // (storage, offset, size, stride, requires_grad, hooks[, metadata]): dtype goes before metadata.
    args.assign(a.begin(), a.begin() + 6);
    args.push_back(dtype);
    args.insert(args.end(), a.begin() + 6, a.end());
  } else {  // _rebuild_tensor(storage, offset, size, stride), torch < 0.4
    args.assign(a.begin(), a.begin() + 4);
    Value* hooks = graph.make(ValueKind::kObject);
    hooks->callable() = graph.make_global("collections", "OrderedDict");
    hooks->args() = graph.make_tuple({});
    args.push_back(graph.make_bool(t.requires_grad));
    args.push_back(hooks);
    args.push_back(dtype);
  }
  set_rebuild(graph, t, v3, std::move(args));
  t.dtype_arg = dtype;
}

}  // namespace

void plan_cast(Checkpoint& checkpoint, const std::vector<TargetTensor>& targets, const PassOptions& options,
               PassReport& report) {
  const DType to = *options.cast_to;
  auto& tensors = impl_of(checkpoint).tensors;
  auto& storages = impl_of(checkpoint).storages;
  auto wanted_type = [&](DType d) {
    if (!is_cast_type(d) || d == to) return false;
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
  // One dtype Global and one _rebuild_tensor_v3 Global for every tensor, so
  // the pickler memoizes them as torch.save does.
  const bool needs_v3 = !storage_class_name(to).has_value();
  Value* dtype_global = nullptr;
  Value* v3_global = nullptr;
  report.cast_to = to;
  report.cast_torch = options.torch.value_or(default_torch_version());
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
    s.cast_rules = cast_rules(options.torch.value_or(default_torch_version()));
    if (needs_v3) s.untyped = true;  // written as torch.UntypedStorage; its numel counts bytes
    report.cast_bytes_after += s.output_nbytes();
    ++report.storages_cast;
    for (size_t u : all) {
      Tensor& t = tensors[u];
      t.dtype = to;
      ++report.tensors_cast;
      if (t.dtype_arg == nullptr && !needs_v3) continue;  // the typed storage class tells the type
      if (dtype_global == nullptr) dtype_global = impl_of(checkpoint).graph.make_global("torch", std::string(dtype_name(to)));
      if (needs_v3 && v3_global == nullptr) v3_global = impl_of(checkpoint).graph.make_global("torch._utils", "_rebuild_tensor_v3");
      rebuild_with_dtype(checkpoint, t, needs_v3 ? v3_global : const_cast<Value*>(&rebuild_function(t)), dtype_global);
    }
  }
}

}  // namespace ckptfix

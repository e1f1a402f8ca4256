// The fit pass (PassOptions::like): the state dict becomes the root, its
// keys renamed by fit_plan's rules, in the model's order, `_metadata`
// renamed along, a BatchNorm's num_batches_tracked made where torch would
// make it; and load_verdict, which says what load_state_dict(strict=True)
// says of a state dict as it is.
#include <algorithm>
#include <map>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ckptfix/error.h"
#include "ckptfix/fit.h"
#include "error_boundary.h"
#include "model/checkpoint_impl.h"
#include "model/dict_selection.h"
#include "model/graph_walk.h"
#include "model/state_dict_values.h"
#include "model/torch_objects.h"
#include "passes/fit_advice.h"
#include "passes/fit_plan.h"
#include "passes/passes_internal.h"
#include "passes/rename_keys.h"

namespace ckptfix {
namespace {

std::string where(const Path& path) { return path.empty() ? std::string("<root>") : path_to_string(path); }

// One state dict of the checkpoint, as the fit sees it.
struct FitDict {
  Path path;
  Value* dict = nullptr;
  std::vector<FitInput> inputs;
  std::vector<Value*> values;  // per input
};

FitDict fit_dict(const CheckpointImpl& impl, const Path& path, Value* dict) {
  if (const auto problem = state_dict_problem(impl, *dict)) {
    throw Error(ErrorKind::kConflict, "'" + where(path) + "' is not a state dict: " + *problem);
  }
  FitDict out{path, dict, {}, {}};
  for (const auto& [k, v] : dict->entries()) {
    FitInput in;
    in.key = k->text;
    switch (entry_kind(impl, *k, *v)) {
      case EntryKind::kTensor: {
        const Tensor* t = impl.tensor_of(v);
        in.shape = t->shape;
        in.dtype = t->dtype;
        break;
      }
      case EntryKind::kSparse: {
        const SparseTensorInfo sparse = *parse_sparse_tensor(impl, *v);
        in.shape = sparse.size;
        in.dtype = impl.tensors[sparse.parts.back()].dtype;
        break;
      }
      default:
        in.tensor = false;
        break;
    }
    out.inputs.push_back(std::move(in));
    out.values.push_back(v);
  }
  return out;
}

std::string quoted_paths(const std::vector<const FitDict*>& dicts) {
  std::string out;
  for (const FitDict* d : dicts) out += (out.empty() ? "'" : ", '") + where(d->path) + "'";
  return out;
}

// The state dict to fit: the one at `key`; else the root or the only one;
// else the one that fits the model best (with the rules, or by its keys as
// they are), several as good refused naming them.
FitDict choose_dict(const CheckpointImpl& impl, const std::string& key, const ModelReference& model,
                    const FitOptions& options, bool rules) {
  if (!key.empty()) {
    const TargetDict d = select_dicts(impl, {key}).front();
    return fit_dict(impl, d.path, d.dict);
  }
  const std::vector<StateDict> candidates = default_state_dicts(impl);
  if (candidates.empty()) {
    const auto not_ones = dicts_of_tensors_not_state_dicts(impl);
    throw Error(ErrorKind::kConflict, "the checkpoint holds no state dict" +
                                          (not_ones.empty() ? std::string() : not_ones.front().reason()));
  }
  std::vector<FitDict> dicts;
  for (const StateDict& sd : candidates) dicts.push_back(fit_dict(impl, sd.path, sd.dict));
  if (dicts.size() == 1) return std::move(dicts.front());
  std::vector<size_t> fitted;
  for (const FitDict& d : dicts) fitted.push_back(plan_fit(d.inputs, model, options, rules).fitted);
  const size_t best = *std::max_element(fitted.begin(), fitted.end());
  std::vector<const FitDict*> tied;
  for (size_t k = 0; k < dicts.size(); ++k) {
    if (fitted[k] == best) tied.push_back(&dicts[k]);
  }
  if (tied.size() > 1) {
    throw Error(ErrorKind::kConflict, "the checkpoint holds " + std::to_string(tied.size()) +
                                          " state dicts that fit the model equally well (" + std::to_string(best) +
                                          " of its " + std::to_string(model.entries.size()) +
                                          " keys each): " + quoted_paths(tied) + "; choose one with `keys`");
  }
  const size_t chosen = static_cast<size_t>(tied.front() - dicts.data());
  return std::move(dicts[chosen]);
}

std::string count_text(size_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// What stands in the way, in a few words, for the message the lines follow.
std::string problems_text(const FitPlan& plan, const FitOptions& options) {
  std::vector<std::string> parts;
  if (!plan.ambiguous.empty()) parts.push_back(count_text(plan.ambiguous.size(), "ambiguity", "ambiguities"));
  if (!plan.missing.empty() && !options.allow_missing) parts.push_back(count_text(plan.missing.size(), "missing key", "missing keys"));
  if (!plan.unexpected.empty() && !options.drop_unexpected) {
    parts.push_back(count_text(plan.unexpected.size(), "unexpected key", "unexpected keys"));
  }
  if (!plan.mismatched.empty() && !options.drop_mismatched) {
    parts.push_back(count_text(plan.mismatched.size(), "size mismatch", "size mismatches"));
  }
  std::string out;
  for (size_t k = 0; k < parts.size(); ++k) out += (k == 0 ? "" : k + 1 == parts.size() ? " and " : ", ") + parts[k];
  return out;
}

// "a.b.c" -> "a.b." (the module's prefix, "" for a key of the root module).
std::string module_prefix(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot + 1);
}

// How many enclosing modules of a key, or of a `_metadata` entry, `_metadata`
// is renamed through. Real models nest a few dozen levels at most; the bound
// keeps a hostile key of 100,000 `module.` segments linear (a deeper module
// keeps its `_metadata` name).
constexpr size_t kMaxModuleLevels = 64;

// The start of `prefix`'s parent module ("a.b." -> 2, "a." -> 0, "" stays 0).
size_t parent_end(std::string_view prefix) {
  if (prefix.size() < 2) return 0;
  const size_t dot = prefix.rfind('.', prefix.size() - 2);
  return dot == std::string_view::npos ? 0 : dot + 1;
}

// The module paths (as prefixes, "" the root) `from` and its ancestors had,
// mapped to where they are now: a key's last segments shared by its old and
// new name are the part that did not move.
void map_modules(const std::string& from, const std::string& to, bool moved,
                 std::unordered_map<std::string, std::string>& modules) {
  std::string strip = module_prefix(from), add = module_prefix(to);
  if (!moved) {
    add = strip;
  } else {
    std::tie(strip, add) = without_shared_tail(strip, add);  // what is left is what was renamed
  }
  // Every ancestor at or below the renamed part maps; those above it do not move.
  const std::string module = module_prefix(from);
  size_t end = module.size();
  for (size_t level = 0; level < kMaxModuleLevels && end >= strip.size(); ++level) {
    const std::string_view ancestor = std::string_view(module).substr(0, end);
    modules.emplace(std::string(ancestor), add + std::string(ancestor.substr(strip.size())));
    if (end == 0) break;
    end = parent_end(ancestor);
  }
}

// `_metadata` renamed with the keys, as consume_prefix_in_state_dict_if_present
// renames it: each module's entry goes where its keys went (a module no key
// names, where its nearest ancestor that one names went; where two meet, the later's value takes the
// earlier's place, as torch's pop-and-assign does).
Value* renamed_metadata(ValueGraph& graph, Value& old_dict, const FitDict& d, const FitPlan& plan,
                        const std::vector<bool>& written) {
  auto* meta = metadata_of(old_dict);
  if (meta == nullptr) return nullptr;
  std::unordered_map<std::string, std::string> modules;  // "a.b." -> "c.b."
  for (int pass = 0; pass < 2; ++pass) {  // keys that stayed first: a module they name stays
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      if (!written[i] || plan.module_moved[i] != (pass == 1)) continue;
      map_modules(d.inputs[i].key, plan.names[i], plan.module_moved[i], modules);
    }
  }
  Value* out = graph.make(ValueKind::kDict);
  std::unordered_map<std::string, size_t> taken;  // name -> its entry in out
  for (const auto& [k, v] : *meta) {
    if (!k->is_str()) continue;
    // The module, or its nearest ancestor a key names (a ReLU has no key of its own).
    const std::string prefix = k->text.empty() ? std::string() : k->text + ".";
    std::string name = k->text;
    size_t end = prefix.size();
    for (size_t level = 0; level < kMaxModuleLevels; ++level) {
      const auto it = modules.find(prefix.substr(0, end));
      if (it != modules.end()) {
        name = it->second + prefix.substr(end);
        break;
      }
      if (end == 0) break;
      end = parent_end(std::string_view(prefix).substr(0, end));
    }
    if (!name.empty() && name.back() == '.') name.pop_back();
    const auto [at, added] = taken.emplace(name, out->entries().size());
    if (!added) {
      out->entries()[at->second].second = v;  // as torch's `metadata[new] = metadata.pop(old)`: the entry keeps its place
      continue;
    }
    out->entries().emplace_back(name == k->text ? k : graph.make_str(name), v);
  }
  return out;
}

// An int64 0 as torch makes a BatchNorm's num_batches_tracked (torch.tensor(0,
// dtype=torch.long)), on the device of the running_mean beside it.
Value* make_batches_tracked(CheckpointImpl& impl, const Value* running_mean) {
  const Tensor* mean = impl.tensor_of(running_mean);
  Storage s;
  s.key = "fit-" + std::to_string(impl.storages.size());
  s.dtype = DType::kInt64;
  s.numel = 1;
  s.nbytes = 8;
  s.location = mean != nullptr && mean->storage >= 0 ? impl.storages[static_cast<size_t>(mean->storage)].location : "cpu";
  impl.owned_bytes.emplace_back(8, '\0');
  s.source.encoding = StorageSource::Encoding::kMemory;
  s.source.memory = reinterpret_cast<const std::byte*>(impl.owned_bytes.back().data());
  s.source.record = "num_batches_tracked (made)";
  const auto storage = static_cast<int32_t>(impl.storages.size());
  impl.storages.push_back(std::move(s));
  Value* call = impl.graph.make(ValueKind::kObject);
  make_rebuild_call(impl.graph, *call, impl.storages, storage, 0, {}, {}, false);
  Tensor t;
  t.value = call;
  t.rebuild = call;
  t.storage = storage;
  t.dtype = DType::kInt64;
  impl.tensor_by_value[call] = impl.tensors.size();
  impl.tensors.push_back(std::move(t));
  return call;
}

// --dtype like: each floating tensor placed on a key the model has in
// another floating type is cast to it (storages as the cast pass converts them).
void cast_like(Checkpoint& checkpoint, const FitDict& d, const FitPlan& plan, const std::vector<bool>& written,
               const ModelReference& model, const PassOptions& options, PassReport& report) {
  CheckpointImpl& impl = impl_of(checkpoint);
  std::map<DType, std::vector<TargetTensor>> by_dtype;
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    if (!written[i]) continue;
    const Tensor* t = impl.tensor_of(d.values[i]);
    if (t == nullptr || t->kind != TensorKind::kDense) continue;
    const DType want = model.entries[static_cast<size_t>(plan.placed[i])].dtype;
    if (want == DType::kUntyped || want == t->dtype || !is_cast_type(want) || !is_cast_type(t->dtype)) continue;
    by_dtype[want].push_back({static_cast<size_t>(t - impl.tensors.data()), plan.names[i], plan.names[i]});
  }
  const uint64_t before = report.tensors_cast;
  for (auto& [dtype, targets] : by_dtype) {
    PassOptions cast = options;
    cast.cast_to = dtype;
    cast.cast_from.clear();
    cast.keep.clear();
    plan_cast(checkpoint, targets, cast, report);
  }
  report.fit->tensors_cast = report.tensors_cast - before;
  report.cast_to.reset();  // many types: the fit report says it per key
}

}  // namespace

void fit_state_dict(Checkpoint& checkpoint, const PassOptions& options, PassReport& report) {
  CheckpointImpl& impl = impl_of(checkpoint);
  const ModelReference& model = *options.like;
  const FitOptions& fit = options.fit;
  FitDict d = choose_dict(impl, options.keys.empty() ? std::string() : options.keys.front(), model, fit, true);
  const FitPlan plan = plan_fit(d.inputs, model, fit);
  if (!plan.acceptable(fit)) {
    Error error(ErrorKind::kConflict, "the state dict '" + where(d.path) + "' does not load into '" + model.name +
                                          "' (" + problems_text(plan, fit) + "); nothing was written");
    for (const std::string& line : refusal_lines(plan, d.inputs, model, fit)) error.detail(line);
    throw error;
  }

  FitReport& out = report.fit.emplace();
  out.reference = model.name;
  out.state_dict = d.path;
  // Placed in the model's order; what is left out, and why.
  std::vector<bool> written(d.inputs.size(), false);
  std::vector<size_t> order;  // inputs written, in output order
  std::vector<bool> mismatched(d.inputs.size(), false);
  for (size_t i : plan.mismatched) mismatched[i] = true;
  for (size_t r = 0; r < model.entries.size(); ++r) {
    const int64_t i = plan.source[r];
    if (i < 0) {
      if (plan.made[r]) out.added.push_back({"", model.entries[r].key, "num_batches_tracked (int64 0, as torch makes it for a BatchNorm saved without it)"});
      continue;
    }
    if (mismatched[static_cast<size_t>(i)]) continue;  // fit.drop_mismatched, else refused above
    written[static_cast<size_t>(i)] = true;
    order.push_back(static_cast<size_t>(i));
  }
  // No silent empty (issue 67): `allow_missing` with `drop_unexpected` once
  // wrote a state dict of none of the file's tensors, exit 0, which
  // load_state_dict(strict=False) then loaded as nothing.
  if (order.empty() && !d.inputs.empty()) {
    Error error(ErrorKind::kConflict,
                "fitting the state dict '" + where(d.path) + "' to '" + model.name + "' would keep none of its " +
                    std::to_string(d.inputs.size()) + " tensors (" + problems_text(plan, fit) +
                    "); nothing was written; where its keys are the model's under other names, `renames` maps them "
                    "(check with the model says which)");
    for (const std::string& line : refusal_lines(plan, d.inputs, model, fit)) error.detail(line);
    throw error;
  }
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    if (written[i]) {
      ++out.kept;
      if (plan.names[i] != d.inputs[i].key) out.moved.push_back({d.inputs[i].key, plan.names[i], plan.rules[i]});
      continue;
    }
    ++out.left_out;
    std::string why = plan.dropped_by[i];
    if (why.empty() && plan.placed[i] < 0) why = "not in the model (`drop_unexpected`)";
    if (why.empty()) {
      const ExpectedEntry& e = model.entries[static_cast<size_t>(plan.placed[i])];
      why = "shape " + torch_size_text(d.inputs[i].shape) + ", the model's " + torch_size_text(e.shape) +
            " (`drop_mismatched`)";
    }
    out.dropped.push_back({d.inputs[i].key, "", why});
  }
  for (size_t r = 0; r < model.entries.size(); ++r) {
    if (plan.source[r] < 0 && !plan.made[r]) {
      out.missing.push_back(model.entries[r].key);
    } else if (plan.source[r] >= 0 && !written[static_cast<size_t>(plan.source[r])]) {
      out.missing.push_back(model.entries[r].key);  // its input was left out (drop_mismatched)
    }
  }
  bool same_order = order.size() == d.inputs.size();
  for (size_t k = 0; same_order && k < order.size(); ++k) same_order = order[k] == k;
  const bool is_root = impl.root == d.dict;
  out.changed = !out.moved.empty() || !out.added.empty() || !out.dropped.empty() || !same_order || !is_root;

  if (!is_root) {
    // What the output leaves behind: the root's other entries (the state dict's own, by its first path element).
    const std::string* first =
        d.path.empty() ? nullptr : std::get_if<std::string>(&d.path.front());
    if (impl.root != nullptr) {
      for (const auto& [k, v] : impl.root->entries()) {
        if (k == nullptr || !k->is_str() || (first != nullptr && k->text == *first)) continue;
        out.left_out_of_file.push_back(k->text);
      }
    }
  }
  if (out.changed) {
    ValueGraph& graph = impl.graph;
    Value* root = graph.make(ValueKind::kObject);
    root->callable() = graph.make_global("collections", "OrderedDict");
    root->args() = graph.make_tuple({});
    impl.note_global("collections", "OrderedDict");
    // Output key -> input, for the running_mean beside a made key (made only if one is).
    std::unordered_map<std::string_view, size_t> by_name;
    for (size_t r = 0; r < model.entries.size(); ++r) {
      const std::string& key = model.entries[r].key;
      const int64_t i = plan.source[r];
      if (i >= 0 && written[static_cast<size_t>(i)]) {
        Value* name = plan.names[i] == d.inputs[i].key ? d.dict->entries()[static_cast<size_t>(i)].first
                                                       : graph.make_str(plan.names[i]);
        root->entries().emplace_back(name, d.values[static_cast<size_t>(i)]);
      } else if (plan.made[r]) {
        if (by_name.empty()) {
          for (size_t k : order) by_name.emplace(plan.names[k], k);
        }
        const std::string mean = key.substr(0, key.size() - std::string("num_batches_tracked").size()) + "running_mean";
        const auto it = by_name.find(mean);
        Value* tensor = make_batches_tracked(impl, it == by_name.end() ? nullptr : d.values[it->second]);
        impl.note_global("torch._utils", "_rebuild_tensor_v2");
        impl.note_global("torch", "LongStorage");
        root->entries().emplace_back(graph.make_str(key), tensor);
      }
    }
    if (Value* meta = renamed_metadata(graph, *d.dict, d, plan, written)) {
      Value* state = graph.make(ValueKind::kDict);
      state->entries().emplace_back(graph.make_str("_metadata"), meta);
      root->states().push_back(state);
    }
    impl.root = root;
  }
  if (fit.dtype_like) cast_like(checkpoint, d, plan, written, model, options, report);
  out.changed = out.changed || out.tensors_cast > 0;
}

namespace {

// The module tree the model's keys describe, as load_state_dict walks it:
// each module's own parameters and buffers, its children in the order they
// first appear (a module holding no state is invisible in the keys).
struct ModuleTree {
  struct Module {
    std::unordered_set<std::string> local;     // its own keys' last segments
    std::unordered_set<std::string> children;  // child names
    std::vector<std::string> child_order;
    size_t order = 0;  // place in load_state_dict's walk (depth first, pre-order)
  };
  std::unordered_map<std::string, Module> modules;  // by prefix: "" the root, "a.b."

  explicit ModuleTree(const ModelReference& model) {
    modules[""];
    for (const ExpectedEntry& e : model.entries) {
      std::string prefix;
      size_t start = 0;
      for (size_t dot; (dot = e.key.find('.', start)) != std::string::npos; start = dot + 1) {
        const std::string child = e.key.substr(start, dot - start);
        Module& parent = modules[prefix];
        if (parent.children.insert(child).second) parent.child_order.push_back(child);
        prefix += child + ".";
        modules[prefix];
      }
      modules[prefix].local.insert(e.key.substr(start));
    }
    // Depth-first pre-order, iteratively (a hostile reference may nest deeply).
    size_t next = 0;
    std::vector<std::string> stack{""};
    while (!stack.empty()) {
      const std::string prefix = std::move(stack.back());
      stack.pop_back();
      Module& m = modules[prefix];
      m.order = next++;
      for (auto it = m.child_order.rbegin(); it != m.child_order.rend(); ++it) stack.push_back(prefix + *it + ".");
    }
  }

  // The module at which load_state_dict judges `key`, when it finds it
  // unexpected. At each module, of the keys under its prefix (its extra
  // state's aside), torch 1.13 finds unexpected one whose next segment is
  // neither a child nor its own state; torch 2.x one of more segments whose
  // next is no child, or of one that is not its own state.
  std::optional<size_t> unexpected_at(const std::string& key, bool torch2) const {
    std::string prefix;
    size_t start = 0;
    for (;;) {
      const Module& m = modules.at(prefix);
      const size_t dot = key.find('.', start);
      const std::string first = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (dot != std::string::npos) {
        if (m.children.count(first)) {
          prefix += first + ".";
          start = dot + 1;
          continue;
        }
        // ("fc.weight.x": 1.13's check stops at "weight", 2.x's wants a module there)
        if (!torch2 && m.local.count(first)) return std::nullopt;
        return m.order;
      }
      if (first == "_extra_state" || m.local.count(first)) return std::nullopt;
      if (!torch2 && m.children.count(first)) return std::nullopt;  // the module's own name
      return m.order;
    }
  }
};

// The `version` _metadata gives each module ("a.b"), as the dict torch
// unpickles has it (a key said twice: the later).
std::unordered_map<std::string, int64_t> metadata_versions(const std::vector<std::pair<Value*, Value*>>* meta) {
  std::unordered_map<std::string, int64_t> out;
  if (meta == nullptr) return out;
  for (const auto& [k, v] : *meta) {
    if (!k->is_str() || !is_dict_like(*v)) continue;
    out.erase(k->text);
    for (const auto& [name, version] : v->entries()) {
      if (name->is_str() && name->text == "version" && version->kind == ValueKind::kInt) {
        out.insert_or_assign(k->text, version->integer);
      }
    }
  }
  return out;
}

}  // namespace

LoadVerdict load_verdict(const Checkpoint& checkpoint, const ModelReference& model, const std::string& key,
                         TorchVersion torch) {
  return error_boundary(checkpoint.file_name(), [&] {
    const CheckpointImpl& impl = impl_of(checkpoint);
    FitOptions none;
    const FitDict d = choose_dict(impl, key, model, none, true);  // the dict fix --like would fit
    const ModuleTree tree(model);
    std::unordered_map<std::string, size_t> in_file;
    for (size_t i = 0; i < d.inputs.size(); ++i) in_file.emplace(d.inputs[i].key, i);
    const std::unordered_map<std::string, int64_t> versions = metadata_versions(metadata_of(*d.dict));

    LoadVerdict verdict;
    verdict.state_dict = d.path;
    std::vector<std::string> missing, mismatches;
    for (const ExpectedEntry& e : model.entries) {
      const auto it = in_file.find(e.key);
      if (it == in_file.end()) {
        // BatchNorm's _load_from_state_dict makes num_batches_tracked for a
        // module saved before version 2 (or whose version the file does not say).
        constexpr std::string_view kTracked = "num_batches_tracked";
        const std::string prefix = module_prefix(e.key);
        if (e.key.size() - prefix.size() == kTracked.size() && e.key.compare(prefix.size(), kTracked.size(), kTracked) == 0) {
          const auto version = versions.find(prefix.empty() ? prefix : prefix.substr(0, prefix.size() - 1));
          if (version == versions.end() || version->second < 2) continue;
        }
        missing.push_back(e.key);
        continue;
      }
      const FitInput& in = d.inputs[it->second];
      if (!e.tensor || is_extra_state_key(e.key) || !in.tensor) continue;  // set_extra_state takes any value
      // A 1-d tensor into a 0-dim parameter: torch takes its first element (0.3-era files).
      if (e.shape.empty() && in.shape.size() == 1 && in.shape[0] >= 1) continue;
      if (in.shape != e.shape) {
        mismatches.push_back("size mismatch for " + e.key + ": copying a param with shape " + torch_size_text(in.shape) +
                             " from checkpoint, the shape in current model is " + torch_size_text(e.shape) + ".");
      }
    }
    // (module order, file order; an extra state first in its module, as torch says it before the rest)
    std::vector<std::tuple<size_t, int64_t, size_t>> unexpected;
    const bool torch2 = torch >= TorchVersion{2, 0};
    std::unordered_set<std::string> expected;
    for (const ExpectedEntry& e : model.entries) expected.insert(e.key);
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      const std::string& k = d.inputs[i].key;
      if (const auto at = tree.unexpected_at(k, torch2)) {
        unexpected.emplace_back(*at, static_cast<int64_t>(i), i);
        continue;
      }
      // The extra state of a module whose class has no set_extra_state (none in the model's keys): every
      // release says it, before the module's other unexpected keys.
      if (!is_extra_state_key(k) || expected.count(k)) continue;
      const auto module = tree.modules.find(module_prefix(k));
      if (module != tree.modules.end()) unexpected.emplace_back(module->second.order, -1, i);
    }
    std::stable_sort(unexpected.begin(), unexpected.end());
    auto joined = [](const std::vector<std::string>& keys) {
      std::string out;
      for (const std::string& k : keys) out += (out.empty() ? "\"" : ", \"") + k + "\"";
      return out;
    };
    if (!missing.empty()) verdict.lines.push_back("Missing key(s) in state_dict: " + joined(missing) + ".");
    if (!unexpected.empty()) {
      std::vector<std::string> keys;
      for (const auto& [order, rank, i] : unexpected) keys.push_back(d.inputs[i].key);
      verdict.lines.push_back("Unexpected key(s) in state_dict: " + joined(keys) + ".");
    }
    verdict.lines.insert(verdict.lines.end(), mismatches.begin(), mismatches.end());
    if (!verdict.loads()) {
      // Whether fix --like repairs it, and what it must be allowed.
      FitOptions options;
      FitPlan plan = plan_fit(d.inputs, model, options);
      if (plan.ambiguous.empty()) {
        // Keys left over on both sides that pair by shape: rename them
        // rather than drop the file's and miss the model's.
        const RenameAdvice advice = advise_renames(d.inputs, model, plan);
        if (!advice.renames.empty()) {
          FitOptions renamed;
          renamed.renames = advice.renames;
          FitPlan with = plan_fit(d.inputs, model, renamed);
          if (with.ambiguous.empty()) options = renamed, plan = std::move(with);
        }
        options.allow_missing = !plan.missing.empty();
        options.drop_unexpected = !plan.unexpected.empty();
        options.drop_mismatched = !plan.mismatched.empty();
        verdict.fix = options;
        for (size_t i = 0; i < d.inputs.size(); ++i) {
          if (!d.inputs[i].tensor) continue;
          ++verdict.tensors;
          const bool mismatched =
              std::find(plan.mismatched.begin(), plan.mismatched.end(), i) != plan.mismatched.end();
          if (plan.placed[i] >= 0 && !mismatched) ++verdict.fix_keeps;
        }
      }
    }
    return verdict;
  });
}

}  // namespace ckptfix

// The weights-only repair: rewrites every value that torch's default
// weights_only load refuses into the plain data it stands for, without
// running anything (docs/cli.md, "weights-only", has the table).
//
// The graph is walked from the root; each value whose class is outside
// torch's allowlist is rewritten in place (so values shared by several
// paths stay shared), then the walk goes on into what it became. A value
// no rule knows is refused, or with drop_unknown replaced by None.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "ckptfix/error.h"
#include "ckptfix/nested.h"
#include "model/graph_walk.h"
#include "model/payloads.h"
#include "model/torch_objects.h"
#include "passes/passes_internal.h"
#include "passes/weights_only_rules.h"
#include "pickle/call_analysis.h"
#include "pickle/global_policy.h"

namespace ckptfix {
namespace {

// The class a value is an instance of, when it has one: the callable of an
// object (REDUCE, NEWOBJ), or a bare global.
const Value* class_of(const Value& v) {
  if (v.kind == ValueKind::kGlobal) return &v;
  if (v.kind == ValueKind::kObject && v.callable() != nullptr && v.callable()->kind == ValueKind::kGlobal) {
    return v.callable();
  }
  return nullptr;
}

// Whether an object's constructor or BUILD state gives it an attribute
// named like a dunder (CallAnalysis::gives_dunder_attributes).
bool gives_dunder_attributes(const Value& v) {
  if (CallAnalysis::gives_dunder_attributes(v.args(), v.kwargs())) return true;
  for (const Value* state : v.states()) {
    if (state != nullptr && CallAnalysis::gives_dunder_attributes(nullptr, state)) return true;
  }
  return false;
}

// On the allowlist of the torch release the output is for.
bool allowed(const Value& global, TorchVersion torch) {
  const GlobalClass c = classify_global(global.text, global.name());
  return c.kind == GlobalKind::kWeightsOnly && c.allowed_since <= torch;
}

// For tensors whose Parameter wrapper the repair made unreachable (a module
// became its state_dict(), which holds the detached tensors): the tensor's
// position is now the plain tensor, as torch's state_dict() gives it.
void unwrap_unreachable_parameters(CheckpointImpl& impl) {
  std::unordered_set<const Value*> reachable;
  walk_checkpoint(impl, impl.root, [&](Value& v, const Path&) { return reachable.insert(&v).second; });
  for (size_t i = 0; i < impl.tensors.size(); ++i) {
    Tensor& t = impl.tensors[i];
    if (!t.parameter || reachable.count(t.value) != 0) continue;
    impl.tensor_by_value.erase(t.value);
    t.value = t.rebuild;
    t.parameter = false;
    const auto& a = rebuild_arguments(t);
    const size_t grad = rebuild_function(t).is_global("torch._utils", "_rebuild_qtensor") ? 5 : 4;
    t.requires_grad = a.size() > grad && a[grad]->kind == ValueKind::kBool && a[grad]->boolean;
  }
}

// drop_unknown: each extra state (or io.BytesIO) whose nested pickle calls
// what the policy refuses becomes None, as an object no rule knows does.
// Without it they stay, and every writer refuses to carry them.
void drop_refused_nested_pickles(Checkpoint& checkpoint, PassReport& report) {
  const std::vector<NestedViolation> found = nested_violations(nested_pickles(checkpoint), {});
  if (found.empty()) return;
  CheckpointImpl& impl = impl_of(checkpoint);
  std::map<Path, std::string> why;  // each value once, with its first violation
  for (const NestedViolation& n : found) why.emplace(n.path, n.what);
  std::unordered_set<const Value*> dropped;
  walk_checkpoint(impl, impl.root, [&](Value& v, const Path& path) {
    const auto it = why.find(path);
    if (it == why.end()) return true;
    dropped.insert(&v);
    report.repaired.push_back({path, "extra state whose " + it->second.substr(4), "None (drop_unknown)"});
    return false;
  });
  // Made apart: a new value must not be made while the graph is iterated.
  std::vector<Value*> holders;
  impl.graph.for_each([&](Value& v) {
    if (v.has_parts() || !v.items.empty()) holders.push_back(&v);
  });
  Value* none = impl.graph.make_none();
  for (Value* h : holders) {
    for (Value*& item : h->items) {
      if (dropped.count(item) != 0) item = none;
    }
    if (!h->has_parts()) continue;
    for (auto& [key, value] : h->entries()) {
      if (dropped.count(value) != 0) value = none;
    }
  }
}

}  // namespace

void make_weights_only(Checkpoint& checkpoint, const PassOptions& options, PassReport& report) {
  CheckpointImpl& impl = impl_of(checkpoint);
  RepairContext ctx{impl, report.repaired, {}, options.torch.value_or(default_torch_version())};
  struct Refused {
    std::string path;
    std::string global;
  };
  std::vector<Refused> refused;
  // Large payloads left in the file (OpenOptions::leave_payloads_in_file):
  // the rules read the text of all but numpy arrays' bytes, which the numpy
  // rule turns into storages where they lie; what it leaves is read in after.
  read_in_payloads(impl, numpy_array_payloads(impl));
  walk_checkpoint(impl, impl.root, [&](Value& v, const Path& path) {
    const Value* cls = class_of(v);
    // An object given a dunder attribute by its constructor or its state
    // (torch's _rebuild_parameter_with_state given {'__setstate__': f}):
    // CPython looks it up on the instance and calls it, so no rule makes
    // it data (made data, the output would not load).
    const bool dunder = v.kind == ValueKind::kObject && gives_dunder_attributes(v);
    // For 1.13 (weights_only=False by default) the oldest allowlist, 2.6's:
    // the repair still makes what weights_only loaders of 2.x load.
    if (!dunder &&
        (cls == nullptr || allowed(*cls, allowlist_release(options.torch.value_or(default_torch_version()))))) {
      return true;
    }
    if (!dunder && repair_value(ctx, v, path)) return true;  // go on into what it became
    const std::string where = path.empty() ? "<root>" : path_to_string(path);
    const std::string what = cls == nullptr ? std::string("an object") : cls->dotted();
    if (!options.drop_unknown) {
      refused.push_back({where, dunder ? what + " given a dunder attribute (a __setstate__ CPython would call)" : what});
      return false;
    }
    report.repaired.push_back({path, what + " object", "None (drop_unknown)"});
    v.reset(ValueKind::kNone);
    return false;
  });
  if (!refused.empty()) {
    std::string list;
    std::map<std::string, std::string> first_path;  // each global once, at its first path
    for (const Refused& r : refused) first_path.emplace(r.global, r.path);
    // A line people read: the first few, then how many more.
    constexpr size_t kListed = 10;
    size_t listed = 0;
    for (const auto& [global, where] : first_path) {
      if (listed++ == kListed) break;
      list += (list.empty() ? "" : ", ") + global + " (at '" + where + "')";
    }
    if (first_path.size() > kListed) list += " and " + std::to_string(first_path.size() - kListed) + " more";
    throw Error(ErrorKind::kUnsupported,
                "values of classes outside torch's weights_only allowlist that no rewrite rule knows: " + list +
                    "; `drop_unknown` replaces them with None");
  }
  read_in_payloads(impl);
  if (options.drop_unknown) drop_refused_nested_pickles(checkpoint, report);
  unwrap_unreachable_parameters(impl);
}

}  // namespace ckptfix

namespace ckptfix {

bool repair_value(RepairContext& ctx, Value& v, const Path& path) {
  return repair_python_value(ctx, v, path) || repair_numpy_value(ctx, v, path) || repair_module(ctx, v, path) ||
         repair_omegaconf(ctx, v, path) || repair_enum_member(ctx, v, path) ||
         repair_plain_object(ctx, v, path);
}

}  // namespace ckptfix

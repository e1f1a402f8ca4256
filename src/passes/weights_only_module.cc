// The weights-only rule for pickled torch.nn.Modules (torch.save(model), or
// a module inside a dict, like Ultralytics' {'model': DetectionModel}): the
// module becomes what module.state_dict() returns, computed from the
// pickled attributes without importing the class.
#include <string_view>

#include "model/graph_walk.h"
#include "passes/weights_only_rules.h"

namespace ckptfix {
namespace {

// Classes whose _version differs from nn.Module's 1 (torch 2.14: every
// torch.nn and torch.ao.nn class with another; a project's own subclasses of
// these inherit theirs, which the pickle does not say).
constexpr std::pair<std::string_view, int> kVersions[] = {
    {"torch.nn.modules.batchnorm.BatchNorm1d", 2},         {"torch.nn.modules.batchnorm.BatchNorm2d", 2},
    {"torch.nn.modules.batchnorm.BatchNorm3d", 2},         {"torch.nn.modules.batchnorm.LazyBatchNorm1d", 2},
    {"torch.nn.modules.batchnorm.LazyBatchNorm2d", 2},     {"torch.nn.modules.batchnorm.LazyBatchNorm3d", 2},
    {"torch.nn.modules.batchnorm.SyncBatchNorm", 2},       {"torch.nn.modules.instancenorm.InstanceNorm1d", 2},
    {"torch.nn.modules.instancenorm.InstanceNorm2d", 2},   {"torch.nn.modules.instancenorm.InstanceNorm3d", 2},
    {"torch.nn.modules.instancenorm.LazyInstanceNorm1d", 2}, {"torch.nn.modules.instancenorm.LazyInstanceNorm2d", 2},
    {"torch.nn.modules.instancenorm.LazyInstanceNorm3d", 2},
};

int version_of(const Value& cls) {
  const std::string dotted = cls.dotted();
  for (const auto& [name, version] : kVersions) {
    if (name == dotted) return version;
  }
  return 1;
}

// The attributes of an object (its BUILD state's dict), or null.
const Value* attributes(const Value& v) {
  if (v.kind != ValueKind::kObject || v.states().size() != 1) return nullptr;
  const Value* state = v.states()[0];
  if (state->kind == ValueKind::kTuple && !state->items.empty()) state = state->items[0];
  return state->kind == ValueKind::kDict ? state : nullptr;
}

const Value* attribute(const Value& attrs, std::string_view name) {
  for (const auto& [k, val] : attrs.entries()) {
    if (k->is_str() && k->text == name) return val;
  }
  return nullptr;
}

bool dict_like(const Value* v) { return v != nullptr && is_dict_like(*v); }

bool is_module(const Value& v) {
  const Value* attrs = attributes(v);
  if (attrs == nullptr || v.callable() == nullptr || v.callable()->kind != ValueKind::kGlobal) return false;
  // torch.ao.nn.quantized modules keep their weights in packed params that
  // state_dict() unpacks in code: not this rule.
  if (v.callable()->text.rfind("torch.ao.nn.quantized", 0) == 0) return false;
  return dict_like(attribute(*attrs, "_parameters")) && dict_like(attribute(*attrs, "_buffers")) &&
         dict_like(attribute(*attrs, "_modules"));
}

struct StateDictBuilder {
  ValueGraph& graph;
  std::vector<std::pair<Value*, Value*>> entries;
  std::vector<std::pair<Value*, Value*>> metadata;

  // Module.state_dict(prefix): its _metadata entry, its parameters, its
  // persistent buffers, then its children, as torch orders them.
  bool add(const Value& module, const std::string& prefix) {
    if (!is_module(module)) return false;
    const Value& attrs = *attributes(module);
    Value* local = graph.make(ValueKind::kDict);
    local->entries().emplace_back(graph.make_str("version"), graph.make_int(version_of(*module.callable())));
    metadata.emplace_back(graph.make_str(prefix.empty() ? "" : prefix.substr(0, prefix.size() - 1)), local);
    for (const auto& [name, param] : attribute(attrs, "_parameters")->entries()) {
      if (!name->is_str() || param->is(ValueKind::kNone)) continue;
      // state_dict() holds param.detach(): the tensor a Parameter wraps.
      Value* tensor = param;
      if (param->is_call_to("torch._utils", "_rebuild_parameter") ||
          param->is_call_to("torch._utils", "_rebuild_parameter_with_state")) {
        tensor = param->args()->items.at(0);
      }
      entries.emplace_back(graph.make_str(prefix + name->text), tensor);
    }
    const Value* transient = attribute(attrs, "_non_persistent_buffers_set");
    auto persistent = [&](const std::string& name) {
      if (transient == nullptr) return true;
      const std::vector<Value*>* names = &transient->items;
      if (transient->kind == ValueKind::kObject && transient->args() != nullptr && !transient->args()->items.empty()) {
        names = &transient->args()->items[0]->items;  // builtins.set([...]) at protocol 2
      }
      for (const Value* n : *names) {
        if (n->is_str() && n->text == name) return false;
      }
      return true;
    };
    for (const auto& [name, buffer] : attribute(attrs, "_buffers")->entries()) {
      if (!name->is_str() || buffer->is(ValueKind::kNone) || !persistent(name->text)) continue;
      entries.emplace_back(graph.make_str(prefix + name->text), buffer);
    }
    for (const auto& [name, child] : attribute(attrs, "_modules")->entries()) {
      if (!name->is_str() || child->is(ValueKind::kNone)) continue;
      if (!add(*child, prefix + name->text + ".")) return false;
    }
    return true;
  }
};

}  // namespace

bool repair_module(RepairContext& ctx, Value& v, const Path& path) {
  if (!is_module(v)) return false;
  ValueGraph& graph = ctx.impl.graph;
  StateDictBuilder sd{graph, {}, {}};
  if (!sd.add(v, "")) return false;
  const std::string was = v.callable()->dotted();
  Value* ordered_dict = graph.make_global("collections", "OrderedDict");
  // OrderedDict(items) with attribute _metadata = OrderedDict(prefix -> {'version': N}).
  Value* metadata = graph.make(ValueKind::kObject);
  metadata->callable() = ordered_dict;
  metadata->args() = graph.make_tuple({});
  metadata->entries() = std::move(sd.metadata);
  Value* state = graph.make(ValueKind::kDict);
  state->entries().emplace_back(graph.make_str("_metadata"), metadata);
  const size_t count = sd.entries.size();
  v.reset(ValueKind::kObject);
  v.callable() = ordered_dict;
  v.args() = graph.make_tuple({});
  v.entries() = std::move(sd.entries);
  v.states().push_back(state);
  ctx.changes.push_back({path, was + " module", "its state_dict() (" + std::to_string(count) + " tensors)"});
  return true;
}

}  // namespace ckptfix

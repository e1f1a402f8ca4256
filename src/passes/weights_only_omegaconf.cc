// The weights-only rule for omegaconf configs (Hydra, Lightning): a
// DictConfig or ListConfig becomes what OmegaConf.to_container(cfg,
// resolve=False) returns. They pickle as NEWOBJ + BUILD of their __dict__:
//   {'_metadata': ..., '_parent': <enclosing config>, '_content': X}
// where X is a dict of key -> node (DictConfig), a list of nodes
// (ListConfig), None, or a str ("???" missing, "${...}" interpolation),
// and a value node (omegaconf.nodes.AnyNode, StringNode, ...) keeps its
// value in '_val'. '_parent' makes the graph cyclic; only '_content' is
// followed.
#include <string_view>

#include "passes/weights_only_rules.h"

namespace ckptfix {
namespace {

constexpr int kMaxNesting = 1000;

const Value* state_field(const Value& v, std::string_view name) {
  if (v.kind != ValueKind::kObject || v.states().size() != 1) return nullptr;
  const Value* state = v.states()[0];
  if (state->kind != ValueKind::kDict) return nullptr;
  for (const auto& [k, val] : state->entries()) {
    if (k->is_str() && k->text == name) return val;
  }
  return nullptr;
}

bool class_is(const Value& v, std::string_view module, std::string_view name) {
  return v.kind == ValueKind::kObject && v.callable() != nullptr && v.callable()->is_global(module, name);
}

bool is_container(const Value& v) {
  return class_is(v, "omegaconf.dictconfig", "DictConfig") || class_is(v, "omegaconf.listconfig", "ListConfig");
}

bool is_value_node(const Value& v) {
  return v.kind == ValueKind::kObject && v.callable() != nullptr && v.callable()->kind == ValueKind::kGlobal &&
         v.callable()->text == "omegaconf.nodes" && state_field(v, "_val") != nullptr;
}

// The plain value of a node: a new dict or list for a container, the value
// itself for a value node. Null when something is not as omegaconf writes it.
Value* plain(ValueGraph& g, Value* node, int depth) {
  if (depth > kMaxNesting) return nullptr;
  if (is_value_node(*node)) return const_cast<Value*>(state_field(*node, "_val"));
  if (!is_container(*node)) return nullptr;
  Value* content = const_cast<Value*>(state_field(*node, "_content"));
  if (content == nullptr) return nullptr;
  if (content->kind == ValueKind::kNone || content->kind == ValueKind::kStr) return content;
  const bool dict = class_is(*node, "omegaconf.dictconfig", "DictConfig");
  if (dict && content->kind == ValueKind::kDict) {
    Value* out = g.make(ValueKind::kDict);
    for (const auto& [key, child] : content->entries()) {
      Value* value = plain(g, child, depth + 1);
      if (value == nullptr) return nullptr;
      out->entries().emplace_back(key, value);
    }
    return out;
  }
  if (!dict && content->kind == ValueKind::kList) {
    Value* out = g.make(ValueKind::kList);
    for (Value* child : content->items) {
      Value* value = plain(g, child, depth + 1);
      if (value == nullptr) return nullptr;
      out->items.push_back(value);
    }
    return out;
  }
  return nullptr;
}

}  // namespace

bool repair_omegaconf(RepairContext& ctx, Value& v, const Path& path) {
  if (!is_container(v)) return false;
  Value* result = plain(ctx.impl.graph, &v, 0);
  if (result == nullptr) return false;
  const std::string was = v.callable()->dotted();
  // `v` itself becomes the container, so every reference to it sees the result.
  const ValueKind kind = result->kind;
  std::string text = result->kind == ValueKind::kStr ? result->text : std::string();
  std::vector<std::pair<Value*, Value*>> entries;
  std::vector<Value*> items;
  if (kind == ValueKind::kDict) entries = result->entries();
  if (kind == ValueKind::kList) items = result->items;
  v.reset(kind);
  v.text = std::move(text);
  if (kind == ValueKind::kDict) v.entries() = std::move(entries);
  if (kind == ValueKind::kList) v.items = std::move(items);
  ctx.changes.push_back({path, was, kind == ValueKind::kDict ? "dict" : kind == ValueKind::kList ? "list" : "its content"});
  return true;
}

}  // namespace ckptfix

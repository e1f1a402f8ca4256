#include "model/graph_walk.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "ckptfix/error.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {
namespace {

constexpr size_t kMaxDepth = 10000;

std::string float_repr(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

class Walker {
 public:
  explicit Walker(const std::function<bool(Value&, const Path&)>& visit) : visit_(visit) {}

  void walk(Value* v) {
    if (path_.size() > kMaxDepth) {
      throw Error(ErrorKind::kUnsupported, "object graph is nested more than " + std::to_string(kMaxDepth) + " levels deep");
    }
    if (!on_path_.insert(v).second) return;  // a cycle
    if (visit_(*v, path_)) children(*v);
    on_path_.erase(v);
  }

 private:
  void child(PathElement element, Value* v) {
    path_.push_back(std::move(element));
    walk(v);
    path_.pop_back();
  }

  void entries(const std::vector<std::pair<Value*, Value*>>& kv) {
    for (const auto& [k, v] : kv) child(key_to_path_element(*k), v);
  }

  void children(Value& v) {
    switch (v.kind) {
      case ValueKind::kDict: entries(v.entries); return;
      case ValueKind::kList:
      case ValueKind::kTuple:
      case ValueKind::kSet:
      case ValueKind::kFrozenSet:
        for (size_t i = 0; i < v.items.size(); ++i) child(static_cast<int64_t>(i), v.items[i]);
        return;
      case ValueKind::kObject: {
        if (is_dict_like(v)) {  // an OrderedDict: its items; its _metadata is not data
          entries(v.entries);
          return;
        }
        int64_t index = 0;
        if (v.args != nullptr) {
          for (Value* a : v.args->items) child(index++, a);
        }
        for (Value* item : v.items) child(index++, item);
        entries(v.entries);
        for (Value* state : v.states) {
          if (state->kind == ValueKind::kDict) {
            entries(state->entries);  // attributes by name
          } else if (state->kind == ValueKind::kTuple) {
            for (Value* part : state->items) {  // (state, slotstate)
              if (part->kind == ValueKind::kDict) entries(part->entries);
            }
          } else {
            walk(state);
          }
        }
        return;
      }
      default: return;
    }
  }

  const std::function<bool(Value&, const Path&)>& visit_;
  Path path_;
  std::unordered_set<const Value*> on_path_;
};

}  // namespace

bool is_dict_like(const Value& v) {
  return v.kind == ValueKind::kDict || v.is_call_to("collections", "OrderedDict");
}

bool is_optimizer_state(const Value& v) {
  if (!is_dict_like(v)) return false;
  bool state = false, groups = false;
  for (const auto& [k, val] : v.entries) {
    if (!k->is_str()) continue;
    state |= k->text == "state";
    groups |= k->text == "param_groups";
  }
  return state && groups;
}

PathElement key_to_path_element(const Value& key) {
  switch (key.kind) {
    case ValueKind::kStr:
    case ValueKind::kPyStr: return key.text;
    case ValueKind::kInt: return key.integer;
    case ValueKind::kBool: return std::string(key.boolean ? "True" : "False");
    case ValueKind::kNone: return std::string("None");
    case ValueKind::kFloat: return float_repr(key.float_bits);
    default: return std::string("<key>");
  }
}

void walk_graph(Value* root, const std::function<bool(Value&, const Path&)>& visit) {
  Walker walker(visit);
  walker.walk(root);
}

std::string path_to_string(const Path& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i) out += '/';
    if (const auto* s = std::get_if<std::string>(&path[i])) {
      out += *s;
    } else {
      out += std::to_string(std::get<int64_t>(path[i]));
    }
  }
  return out;
}

std::vector<TensorPosition> Checkpoint::tensor_positions() const {
  std::vector<TensorPosition> out;
  walk_graph(impl_->root, [&](Value& v, const Path& path) {
    auto it = impl_->tensor_by_value.find(&v);
    if (it == impl_->tensor_by_value.end()) return true;
    out.push_back({path, it->second});
    return false;  // a tensor's arguments are not positions
  });
  return out;
}

std::vector<StateDict> Checkpoint::state_dicts() const {
  std::vector<StateDict> out;
  // walk_graph has no "leave" callback; track optimizer nesting by path prefix.
  std::vector<Path> optimizer_paths;
  walk_graph(impl_->root, [&](Value& v, const Path& path) {
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
    size_t tensors = 0;
    bool all = !v.entries.empty();
    for (const auto& [k, val] : v.entries) {
      if (!k->is_str() || !impl_->tensor_by_value.count(val)) {
        all = false;
        break;
      }
      ++tensors;
    }
    if (all) {
      out.push_back({path, &v, !optimizer_paths.empty(), tensors});
      return false;
    }
    return true;
  });
  return out;
}

}  // namespace ckptfix

#include "model/graph_walk.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "model/checkpoint_impl.h"
#include "pickle/pointer_set.h"

namespace ckptfix {
namespace {

std::string float_repr(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

// One child of a value: the value, and how its path element is named (a
// dict key, an index, or nothing for a BUILD state that is not a dict).
struct Child {
  enum class Element : uint8_t { kKey, kIndex, kNone };
  Value* value;
  const Value* key = nullptr;
  int64_t index = 0;
  Element element = Element::kNone;
};

void add_entries(std::vector<Child>& out, const std::vector<std::pair<Value*, Value*>>& kv) {
  for (const auto& [k, v] : kv) out.push_back({v, k, 0, Child::Element::kKey});
}

// The children of `v`, in the order the recursive definition (and pickle) has them.
std::vector<Child> children_of(const Value& v) {
  std::vector<Child> out;
  switch (v.kind) {
    case ValueKind::kDict: add_entries(out, v.entries()); break;
    case ValueKind::kList:
    case ValueKind::kTuple:
    case ValueKind::kSet:
    case ValueKind::kFrozenSet:
      for (size_t i = 0; i < v.items.size(); ++i) out.push_back({v.items[i], nullptr, static_cast<int64_t>(i), Child::Element::kIndex});
      break;
    case ValueKind::kObject: {
      if (is_dict_like(v)) {  // an OrderedDict: its items; its _metadata is not data
        add_entries(out, v.entries());
        break;
      }
      int64_t index = 0;
      if (v.args() != nullptr) {
        for (Value* a : v.args()->items) out.push_back({a, nullptr, index++, Child::Element::kIndex});
      }
      for (Value* item : v.items) out.push_back({item, nullptr, index++, Child::Element::kIndex});
      add_entries(out, v.entries());
      for (Value* state : v.states()) {
        if (state->kind == ValueKind::kDict) {
          add_entries(out, state->entries());  // attributes by name
        } else if (state->kind == ValueKind::kTuple) {
          for (Value* part : state->items) {  // (state, slotstate)
            if (part->kind == ValueKind::kDict) add_entries(out, part->entries());
          }
        } else {
          out.push_back({state});
        }
      }
      break;
    }
    default: break;
  }
  return out;
}

// What visiting a value may copy of its own, in steps: one per child, and
// one per 16 bytes of its keys' text (state_dicts copies a dict's keys
// without descending into it).
uint64_t fanout(const Value& v) {
  uint64_t n = v.items.size();
  if (!v.has_parts()) return n;
  const auto entries = [&n](const Value& d) {
    uint64_t key_bytes = 0;
    for (const auto& entry : d.entries()) key_bytes += entry.first != nullptr ? entry.first->text.size() : 0;
    n += d.entries().size() + key_bytes / 16;
  };
  entries(v);
  n += v.states().size();
  if (v.args() != nullptr) n += v.args()->items.size();
  for (const Value* state : v.states()) {
    if (state->has_parts()) entries(*state);
    n += state->items.size();
  }
  return n;
}

uint64_t element_bytes(const PathElement& e) {
  const auto* s = std::get_if<std::string>(&e);
  return s != nullptr ? s->size() : sizeof(int64_t);
}

class Walker {
 public:
  Walker(const std::function<bool(Value&, const Path&)>& visit, const WalkLimits& limits)
      : visit_(visit), limits_(limits) {}

  void walk(Value* root) {
    enter(root, false);
    while (!frames_.empty()) {
      Frame& f = frames_.back();
      if (f.next < f.children.size()) {
        const Child c = f.children[f.next++];
        if (c.element != Child::Element::kNone) {
          push_element(c.element == Child::Element::kKey ? key_to_path_element(*c.key) : PathElement(c.index));
        }
        enter(c.value, c.element != Child::Element::kNone);
      } else {
        on_path_.erase(f.value);
        const bool element = f.element;
        frames_.pop_back();
        if (element) pop_element();
      }
    }
  }

 private:
  struct Frame {
    Value* value;
    bool element;  // a path element was pushed for it
    std::vector<Child> children;
    size_t next = 0;
  };

  void enter(Value* v, bool element) {
    // A visit is charged for what a visitor may keep of it: the path (its
    // elements and their bytes, which tensor_positions copies) and the
    // value's own entries (which state_dicts copies). Memory kept by any
    // walk is then bounded by the step limit, not by the number of paths
    // (a billion-laughs graph of 1 KB has 2^64 of them).
    steps_ += 1 + path_.size() + fanout(*v) + path_bytes_ / 16;
    if (limits_.max_steps != 0 && steps_ > limits_.max_steps) {
      throw Error(ErrorKind::kLimit, "walking the object graph takes more than " + std::to_string(limits_.max_steps) +
                                         " steps: it reaches values through very many or very long paths "
                                         "(limit max_walk_steps = " + std::to_string(limits_.max_steps) + ")");
    }
    if (frames_.size() >= limits_.max_depth + 1) {
      throw Error(ErrorKind::kLimit, "the object graph is nested more than " + std::to_string(limits_.max_depth) +
                                         " levels deep (limit max_depth = " + std::to_string(limits_.max_depth) + ")");
    }
    if (!on_path_.insert(v)) {  // a cycle
      if (element) pop_element();
      return;
    }
    Frame f{v, element, {}, 0};
    if (visit_(*v, path_)) f.children = children_of(*v);
    frames_.push_back(std::move(f));
  }

  void push_element(PathElement e) {
    path_bytes_ += element_bytes(e);
    path_.push_back(std::move(e));
  }
  void pop_element() {
    path_bytes_ -= element_bytes(path_.back());
    path_.pop_back();
  }

  const std::function<bool(Value&, const Path&)>& visit_;
  const WalkLimits limits_;
  Path path_;
  uint64_t path_bytes_ = 0;
  uint64_t steps_ = 0;
  std::vector<Frame> frames_;
  PointerSet<Value> on_path_;
};

}  // namespace

bool is_dict_like(const Value& v) {
  return v.kind == ValueKind::kDict || v.is_call_to("collections", "OrderedDict");
}

bool is_optimizer_state(const Value& v) {
  if (!is_dict_like(v)) return false;
  bool state = false, groups = false;
  for (const auto& [k, val] : v.entries()) {
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

void walk_graph(Value* root, const std::function<bool(Value&, const Path&)>& visit, const WalkLimits& limits) {
  Walker walker(visit, limits);
  walker.walk(root);
}

WalkLimits walk_limits(const CheckpointImpl& checkpoint) {
  return {checkpoint.limits.max_depth, checkpoint.walk_steps()};
}

std::string object_pickle_name(const CheckpointImpl& checkpoint) {
  if (checkpoint.format == CheckpointFormat::kLegacy) return "legacy object pickle";
  if (checkpoint.format == CheckpointFormat::kSafetensors) return "safetensors header";
  if (checkpoint.format == CheckpointFormat::kShardIndex) return "shard index";
  if (checkpoint.format == CheckpointFormat::kDcp) return "distributed checkpoint metadata";
  return checkpoint.archive_root + "/data.pkl";
}

void walk_checkpoint(const CheckpointImpl& checkpoint, Value* root, const std::function<bool(Value&, const Path&)>& visit) {
  try {
    walk_graph(root, visit, walk_limits(checkpoint));
  } catch (Error& e) {
    e.at(object_pickle_name(checkpoint));
    throw;
  }
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
  return error_boundary(file_name(), [&] {
    std::vector<TensorPosition> out;
    walk_checkpoint(*impl_, impl_->root, [&](Value& v, const Path& path) {
      const size_t* tensor = impl_->tensor_by_value.find(&v);
      if (tensor == nullptr) return true;
      out.push_back({path, *tensor});
      return false;  // a tensor's arguments are not positions
    });
    return out;
  });
}

}  // namespace ckptfix

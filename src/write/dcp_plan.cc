#include "write/dcp_plan.h"

#include <unordered_map>
#include <unordered_set>

#include "ckptfix/error.h"
#include "model/graph_walk.h"
#include "model/state_dict_values.h"

namespace ckptfix {
namespace {

class Flattener {
 public:
  explicit Flattener(const CheckpointImpl& impl) : impl_(impl), max_depth_(impl.limits.max_depth) {}

  std::vector<DcpItem> run() {
    const Value* root = impl_.root;
    if (root == nullptr || !is_dict_like(*root)) {
      throw Error(ErrorKind::kInvalidArgument,
                  "a distributed checkpoint holds a dict (what dcp.save takes) and the root of this checkpoint is " +
                      (root == nullptr                 ? std::string("nothing")
                       : impl_.tensor_of(root) != nullptr ? std::string("a tensor")
                                                          : describe_value(*root)) +
                      "; choose a dict with `extract`");
    }
    std::vector<DcpPathStep> path;
    descend_mapping(root, path, 0);
    return std::move(items_);
  }

 private:
  bool is_tensor(const Value* v) const { return impl_.tensor_of(v) != nullptr; }

  void check_depth(size_t depth, const std::vector<DcpPathStep>& path) const {
    if (depth > max_depth_) {
      throw Error(ErrorKind::kLimit, "the dict nests deeper than " + std::to_string(max_depth_) +
                                         " levels, which DCP cannot flatten")
          .at("key '" + short_fqn(path) + "'");
    }
  }

  // A container met again inside itself: Python's flattening would recurse
  // until its stack ran out.
  void enter(const Value* container, const std::vector<DcpPathStep>& path) {
    if (!on_path_.insert(container).second) {
      throw Error(ErrorKind::kUnsupported, "the value here holds itself, which DCP cannot flatten")
          .at("key '" + short_fqn(path) + "'");
    }
  }

  // _is_terminal: a list is one value unless it holds a tensor, a mapping or
  // a list that is not one value itself.
  bool is_terminal(const Value* v, size_t depth, const std::vector<DcpPathStep>& path) {
    if (is_dict_like(*v)) return false;
    if (v->kind != ValueKind::kList) return true;
    if (const auto it = terminal_.find(v); it != terminal_.end()) return it->second;
    check_depth(depth, path);
    if (!checking_.insert(v).second) {
      throw Error(ErrorKind::kUnsupported, "a list here holds itself, which DCP cannot flatten")
          .at("key '" + short_fqn(path) + "'");
    }
    bool terminal = true;
    for (const Value* entry : v->items) {
      if (is_tensor(entry) || is_dict_like(*entry) ||
          (entry->kind == ValueKind::kList && !is_terminal(entry, depth + 1, path))) {
        terminal = false;
        break;
      }
    }
    checking_.erase(v);
    terminal_.emplace(v, terminal);
    return terminal;
  }

  void descend_mapping(const Value* dict, std::vector<DcpPathStep>& path, size_t depth) {
    check_depth(depth, path);
    enter(dict, path);
    for (const auto& [key, value] : dict->entries()) {
      DcpPathStep step;
      switch (key->kind) {
        case ValueKind::kStr: step.key = key->text; break;
        case ValueKind::kInt: step.key = std::to_string(key->integer); break;  // str(k)
        case ValueKind::kBool: step.key = key->boolean ? "True" : "False"; break;
        default:
          throw Error(ErrorKind::kUnsupported, "a dict key is " + describe_value(*key) +
                                                   "; DCP names keys with str(), which ckptfix writes for str, int "
                                                   "and bool keys")
              .at("key '" + fqn_of(path) + "'");
      }
      path.push_back(std::move(step));
      visit(value, path, depth + 1);
      path.pop_back();
    }
    on_path_.erase(dict);
  }

  // _traverse_obj
  void visit(Value* value, std::vector<DcpPathStep>& path, size_t depth) {
    if (is_dict_like(*value)) {
      descend_mapping(value, path, depth);
    } else if (is_terminal(value, depth, path)) {
      leaf(value, path);
    } else {  // a list that holds tensors or mappings
      check_depth(depth, path);
      enter(value, path);
      for (size_t i = 0; i < value->items.size(); ++i) {
        DcpPathStep step;
        step.is_int = true;
        step.index = static_cast<int64_t>(i);
        path.push_back(step);
        visit(value->items[i], path, depth + 1);
        path.pop_back();
      }
      on_path_.erase(value);
    }
  }

  void leaf(Value* value, const std::vector<DcpPathStep>& path) {
    DcpItem item;
    item.fqn = fqn_of(path);
    item.path = path;
    item.value = value;
    item.tensor = impl_.tensor_of(value);
    if (item.tensor != nullptr && item.tensor->kind != TensorKind::kDense) {
      throw Error(ErrorKind::kUnsupported, std::string("it is a ") +
                                               (item.tensor->kind == TensorKind::kMeta ? "meta" : "quantized") +
                                               " tensor, which ckptfix does not write into a distributed checkpoint")
          .at("key '" + item.fqn + "'");
    }
    if (!fqns_.insert(item.fqn).second) {
      throw Error(ErrorKind::kUnsupported, "two values flatten to this key (DCP joins a path with '.'; torch's "
                                           "flatten_state_dict refuses it as a duplicated flatten key)")
          .at("key '" + item.fqn + "'");
    }
    items_.push_back(std::move(item));
  }

  // For messages: a deep path's first steps and its last.
  static std::string short_fqn(const std::vector<DcpPathStep>& path) {
    if (path.size() <= 8) return fqn_of(path);
    std::vector<DcpPathStep> head(path.begin(), path.begin() + 4);
    return fqn_of(head) + "...(" + std::to_string(path.size() - 5) + " more)..." + fqn_of({path.back()});
  }

  static std::string fqn_of(const std::vector<DcpPathStep>& path) {
    std::string fqn;
    for (const DcpPathStep& step : path) {
      if (!fqn.empty()) fqn += '.';
      fqn += step.is_int ? std::to_string(step.index) : step.key;
    }
    return fqn;
  }

  const CheckpointImpl& impl_;
  const uint64_t max_depth_;
  std::vector<DcpItem> items_;
  std::unordered_set<std::string> fqns_;
  std::unordered_map<const Value*, bool> terminal_;
  std::unordered_set<const Value*> on_path_, checking_;
};

}  // namespace

std::vector<DcpItem> plan_dcp_items(const CheckpointImpl& impl) { return Flattener(impl).run(); }

}  // namespace ckptfix

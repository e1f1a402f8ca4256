// The globals the current graph still names, for warnings about what a
// rewritten file will ask its loader to import. An explicit stack and a
// visited set: linear in the graph, however deep or shared it is.
#include <unordered_set>

#include "model/checkpoint_impl.h"
#include "pickle/global_policy.h"

namespace ckptfix {

std::vector<GlobalRef> Checkpoint::reachable_globals() const {
  std::vector<GlobalRef> out;
  std::unordered_set<const Value*> seen;
  std::unordered_set<std::string> named;  // length-prefixed module + name, as note_global keys them
  std::vector<const Value*> stack;
  auto push = [&](const Value* v) {
    if (v != nullptr && seen.insert(v).second) stack.push_back(v);
  };
  push(impl_->root);
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (v->kind == ValueKind::kGlobal) {
      if (named.insert(std::to_string(v->text.size()) + ":" + v->text + v->name()).second) {
        const GlobalClass c = classify_global(v->text, v->name());
        out.push_back({v->text, v->name(), c.kind, c.allowed_since});
      }
      continue;
    }
    // Children in reverse, so that globals come out in pickle order.
    for (auto it = v->states().rbegin(); it != v->states().rend(); ++it) push(*it);
    for (auto it = v->entries().rbegin(); it != v->entries().rend(); ++it) {
      push(it->second);
      push(it->first);
    }
    for (auto it = v->items.rbegin(); it != v->items.rend(); ++it) push(*it);
    push(v->pid());
    push(v->kwargs());
    push(v->args());
    push(v->callable());
  }
  return out;
}

}  // namespace ckptfix

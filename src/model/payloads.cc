// Reading in payloads left in the input file. An explicit stack and a
// visited set, as in reachable_globals.cc: linear in the graph, however deep
// or shared it is. Every child is followed (dict keys, callables, persistent
// ids too), since the pickler writes them all.
#include "model/payloads.h"

#include <vector>

#include "ckptfix/error.h"
#include "model/graph_walk.h"

namespace ckptfix {

void read_in_payload(const CheckpointImpl& checkpoint, Value& v) {
  if (!v.in_file()) return;
  std::string text(v.in_file_length(), '\0');
  checkpoint.file->read(v.in_file_offset(), std::as_writable_bytes(std::span(text)), object_pickle_name(checkpoint));
  v.text = std::move(text);
  v.set_in_file(0, 0);
}

void read_in_payloads(CheckpointImpl& checkpoint, const std::unordered_set<const Value*>& keep) {
  std::unordered_set<const Value*> seen;
  std::vector<Value*> stack;
  auto push = [&](Value* v) {
    if (v != nullptr && seen.insert(v).second) stack.push_back(v);
  };
  push(checkpoint.root);
  while (!stack.empty()) {
    Value* v = stack.back();
    stack.pop_back();
    if (v->in_file() && keep.count(v) == 0) read_in_payload(checkpoint, *v);
    const Value& c = *v;  // the const accessors, which make no parts for a value without
    for (Value* item : c.items) push(item);
    for (const auto& [key, value] : c.entries()) {
      push(key);
      push(value);
    }
    for (Value* state : c.states()) push(state);
    push(c.callable());
    push(c.args());
    push(c.kwargs());
    push(c.pid());
  }
}

}  // namespace ckptfix

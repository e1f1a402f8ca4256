#include "model/prune_lost.h"

#include <unordered_map>

#include "model/graph_walk.h"
#include "model/torch_objects.h"

namespace ckptfix {
namespace {

// A call that rebuilds a tensor from what its arguments hold (a storage, or
// a tensor it wraps): torch._utils._rebuild_*, _rebuild_from_type_v2.
bool is_rebuild(const Value& v) {
  if (v.kind != ValueKind::kObject || v.callable() == nullptr || v.callable()->kind != ValueKind::kGlobal) return false;
  const Value& c = *v.callable();
  return (c.text == "torch._utils" && c.name().rfind("_rebuild", 0) == 0) ||
         (c.text == "torch._tensor" && c.name() == "_rebuild_from_type_v2");
}

}  // namespace

void prune_lost_tensors(CheckpointImpl& impl) {
  SalvageLog& log = *impl.salvage;
  if (log.lost_storages.empty()) return;
  // The persistent ids of lost storages, and their sizes.
  std::unordered_map<const Value*, std::string> lost;  // value -> the lost storage's key
  std::unordered_map<std::string, uint64_t> bytes_of;
  impl.graph.for_each([&](Value& v) {
    if (v.kind != ValueKind::kPersistentId || v.pid() == nullptr) return;
    const std::optional<StoragePid> pid = parse_storage_pid(*v.pid());
    if (!pid || log.lost_storages.count(pid->key) == 0) return;
    lost.emplace(&v, pid->key);
    bytes_of[pid->key] = pid->numel * storage_element_size(*pid);
  });
  // The tensors over them, and what wraps those (a Parameter, a subclass).
  for (bool changed = true; changed;) {
    changed = false;
    impl.graph.for_each([&](Value& v) {
      if (lost.count(&v) != 0 || !is_rebuild(v) || v.args() == nullptr) return;
      for (const Value* a : v.args()->items) {
        auto it = lost.find(a);
        if (it == lost.end() && a->kind == ValueKind::kTuple) {  // _rebuild_from_type_v2's argument tuple
          for (const Value* b : a->items) {
            if ((it = lost.find(b)) != lost.end()) break;
          }
        }
        if (it != lost.end()) {
          lost.emplace(&v, it->second);
          changed = true;
          return;
        }
      }
    });
  }
  // Where each lost tensor is, for the report.
  walk_checkpoint(impl, impl.root, [&](Value& v, const Path& path) {
    const auto it = lost.find(&v);
    if (it == lost.end()) return true;
    if (v.kind != ValueKind::kPersistentId) {
      const std::string storage = log.storage_record_prefix.empty() ? "storage '" + it->second + "'"
                                                                     : log.storage_record_prefix + it->second;
      log.lost.push_back({path.empty() ? "<root>" : path_to_string(path), storage, bytes_of[it->second],
                          log.lost_storages.at(it->second)});
    }
    return false;
  });
  // Out of dicts; None elsewhere. The edits are collected first: making the
  // None value must not happen while the graph is being iterated.
  std::vector<Value*> dicts, holders;
  impl.graph.for_each([&](Value& v) {
    if (v.has_parts()) dicts.push_back(&v);
    if (!v.items.empty() || (v.has_parts() && !v.states().empty())) holders.push_back(&v);
  });
  Value* none = impl.graph.make_none();
  for (Value* d : dicts) {
    auto& entries = d->entries();
    std::erase_if(entries, [&](const auto& kv) { return lost.count(kv.second) != 0; });
    for (Value* state : d->states()) {
      if (state->kind == ValueKind::kDict) {
        std::erase_if(state->entries(), [&](const auto& kv) { return lost.count(kv.second) != 0; });
      }
    }
  }
  for (Value* h : holders) {
    for (Value*& item : h->items) {
      if (lost.count(item) != 0) item = none;
    }
    if (h->has_parts()) {
      for (Value*& state : h->states()) {
        if (lost.count(state) != 0) state = none;
      }
    }
  }
  if (lost.count(impl.root) != 0) impl.root = none;
  for (const auto& [v, key] : lost) const_cast<Value*>(v)->reset(ValueKind::kNone);
}

}  // namespace ckptfix

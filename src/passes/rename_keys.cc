#include "passes/rename_keys.h"

#include <deque>
#include <list>
#include <unordered_map>

#include "ckptfix/error.h"
#include "model/graph_walk.h"

namespace ckptfix {
namespace {

using Entries = std::vector<std::pair<Value*, Value*>>;

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

std::string without_trailing_dot(std::string prefix) {
  while (!prefix.empty() && prefix.back() == '.') prefix.pop_back();
  return prefix;
}

Entries::iterator find_key(Entries& entries, const std::string& key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (it->first->is_str() && it->first->text == key) return it;
  }
  return entries.end();
}

[[noreturn]] void collision(const Path& path, const std::string& a, const std::string& b, const std::string& verb) {
  throw Error(ErrorKind::kConflict, verb + " would make keys '" + a + "' and '" + b + "' the same in '" +
                                        (path.empty() ? std::string("<root>") : path_to_string(path)) +
                                        "'; nothing was written");
}

// torch's consume_prefix_in_state_dict_if_present on _metadata:
//   for key in list(metadata): if key == bare or key.startswith(prefix):
//       metadata[key[len(prefix):] or ""] = metadata.pop(key)
// pop then assignment: a new key goes last, an existing one keeps its place.
// Done on a list with an index of the str keys, so that each key costs
// O(1) however large a (hostile) _metadata is.
void rename_metadata(ValueGraph& graph, Entries& meta, const std::string& prefix) {
  const std::string bare = without_trailing_dot(prefix);
  using Order = std::list<std::pair<Value*, Value*>>;
  Order order(meta.begin(), meta.end());
  std::unordered_map<std::string, std::deque<Order::iterator>> index;  // str key -> entries, first first
  std::vector<std::string> snapshot;
  for (auto it = order.begin(); it != order.end(); ++it) {
    if (!it->first->is_str()) continue;
    index[it->first->text].push_back(it);
    snapshot.push_back(it->first->text);
  }
  for (const std::string& key : snapshot) {
    if (key.empty() || !(key == bare || starts_with(key, prefix))) continue;
    auto found = index.find(key);
    if (found == index.end() || found->second.empty()) continue;  // already renamed (a duplicate key)
    const Order::iterator it = found->second.front();
    found->second.pop_front();
    Value* value = it->second;
    order.erase(it);
    const std::string to = key == bare ? std::string() : key.substr(prefix.size());
    auto& existing = index[to];
    if (!existing.empty()) {
      existing.front()->second = value;  // assignment keeps the existing key's position
    } else {
      existing.push_back(order.insert(order.end(), {graph.make_str(to), value}));
    }
  }
  meta.assign(order.begin(), order.end());
}

}  // namespace

Entries* metadata_of(Value& dict) {
  if (dict.kind != ValueKind::kObject) return nullptr;
  for (Value* state : dict.states()) {
    if (state->kind != ValueKind::kDict) continue;
    for (auto& [k, v] : state->entries()) {
      if (k->is_str() && k->text == "_metadata" && is_dict_like(*v)) return &v->entries();
    }
  }
  return nullptr;
}

void strip_prefix(ValueGraph& graph, Value& dict, const Path& path, const std::string& prefix, PassReport& report) {
  if (prefix.empty()) return;
  Entries& entries = dict.entries();
  // Check for collisions before changing anything.
  std::unordered_map<std::string, std::string> final_names;  // new key -> original key
  for (const auto& [k, v] : entries) {
    if (!k->is_str()) continue;
    const std::string to = starts_with(k->text, prefix) ? k->text.substr(prefix.size()) : k->text;
    auto [it, inserted] = final_names.emplace(to, k->text);
    if (!inserted) collision(path, it->second, k->text, "stripping '" + prefix + "'");
  }
  Entries kept, moved;
  for (auto& entry : entries) {
    if (entry.first->is_str() && starts_with(entry.first->text, prefix)) {
      const std::string to = entry.first->text.substr(prefix.size());
      report.renames.push_back({path, entry.first->text, to});
      moved.emplace_back(graph.make_str(to), entry.second);
    } else {
      kept.push_back(entry);
    }
  }
  if (moved.empty()) return;
  kept.insert(kept.end(), moved.begin(), moved.end());  // pop + insert: renamed keys go last
  entries = std::move(kept);

  if (Entries* meta = metadata_of(dict)) rename_metadata(graph, *meta, prefix);
}

void add_prefix(ValueGraph& graph, Value& dict, const Path& path, const std::string& prefix, PassReport& report) {
  if (prefix.empty()) return;
  Entries& entries = dict.entries();
  std::unordered_map<std::string, std::string> final_names;
  for (const auto& [k, v] : entries) {
    if (!k->is_str()) continue;
    const std::string to = starts_with(k->text, prefix) ? k->text : prefix + k->text;
    auto [it, inserted] = final_names.emplace(to, k->text);
    if (!inserted) collision(path, it->second, k->text, "adding '" + prefix + "'");
  }
  bool renamed = false;
  for (auto& entry : entries) {
    if (!entry.first->is_str() || starts_with(entry.first->text, prefix)) continue;
    const std::string to = prefix + entry.first->text;
    report.renames.push_back({path, entry.first->text, to});
    entry.first = graph.make_str(to);
    renamed = true;
  }
  if (!renamed) return;

  if (Entries* meta = metadata_of(dict)) {
    const std::string bare = without_trailing_dot(prefix);
    const bool wrapped = find_key(*meta, bare) != meta->end();
    for (auto& entry : *meta) {
      if (!entry.first->is_str()) continue;
      const std::string& key = entry.first->text;
      if (key == bare || starts_with(key, prefix)) continue;
      if (key.empty()) {
        if (!wrapped) entry.first = graph.make_str(bare);
      } else {
        entry.first = graph.make_str(prefix + key);
      }
    }
    if (!wrapped) {  // the wrapper module's own entry, as nn.DataParallel's state_dict has it
      Value* version = graph.make(ValueKind::kDict);
      version->entries().emplace_back(graph.make_str("version"), graph.make_int(1));
      meta->insert(meta->begin(), {graph.make_str(""), version});
    }
  }
}

}  // namespace ckptfix

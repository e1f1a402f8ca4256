#include "passes/rename_keys.h"

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

// The `_metadata` OrderedDict torch attaches to a state dict (BUILD state).
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

}  // namespace

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

  if (Entries* meta = metadata_of(dict)) {
    const std::string bare = without_trailing_dot(prefix);
    std::vector<std::string> snapshot;
    for (const auto& [k, v] : *meta) {
      if (k->is_str()) snapshot.push_back(k->text);
    }
    for (const std::string& key : snapshot) {
      if (key.empty() || !(key == bare || starts_with(key, prefix))) continue;
      const std::string to = key == bare ? std::string() : key.substr(prefix.size());
      auto it = find_key(*meta, key);
      Value* value = it->second;
      meta->erase(it);
      auto existing = find_key(*meta, to);
      if (existing != meta->end()) {
        existing->second = value;  // assignment keeps the existing key's position
      } else {
        meta->emplace_back(graph.make_str(to), value);
      }
    }
  }
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

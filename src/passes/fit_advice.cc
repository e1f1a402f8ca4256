#include "passes/fit_advice.h"

#include <map>
#include <set>

namespace ckptfix {
namespace {

// "a.b.c" -> "a.b." ("" for a key of the root module, which no rename moves).
std::string module_of(const std::string& key) {
  const size_t dot = key.rfind('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot + 1);
}

// A module's parameters as their leaf names and shapes, for comparing.
using Signature = std::set<std::pair<std::string, std::vector<int64_t>>>;

// A literal for --rename's regex (Python's re syntax).
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::string_view(".^$*+?()[]{}|\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// The first dotted segment ("head." of "head.fc.").
std::string first_segment(const std::string& prefix) { return prefix.substr(0, prefix.find('.') + 1); }

}  // namespace

RenameAdvice advise_renames(const std::vector<FitInput>& inputs, const ModelReference& model, const FitPlan& plan) {
  RenameAdvice advice;
  std::map<std::string, Signature> left, wanted;  // module prefix -> signature
  for (size_t i : plan.unexpected) {
    const std::string module = module_of(inputs[i].key);
    if (module.empty() || !inputs[i].tensor) continue;
    left[module].emplace(inputs[i].key.substr(module.size()), inputs[i].shape);
  }
  for (size_t r : plan.missing) {
    const std::string module = module_of(model.entries[r].key);
    if (module.empty() || !model.entries[r].tensor) continue;
    wanted[module].emplace(model.entries[r].key.substr(module.size()), model.entries[r].shape);
  }
  // One to one: a module of the file whose parameters match exactly one
  // module of the model's, which no other module of the file matches.
  std::map<std::string, std::vector<std::string>> candidates, back;
  for (const auto& [u, su] : left) {
    for (const auto& [m, sm] : wanted) {
      if (su == sm) candidates[u].push_back(m), back[m].push_back(u);
    }
  }
  std::vector<std::pair<std::string, std::string>> pairs;  // (file module, model module)
  for (const auto& [u, ms] : candidates) {
    if (ms.size() == 1 && back[ms[0]].size() == 1) pairs.emplace_back(u, ms[0]);
  }
  if (pairs.empty()) return advice;
  // As few rules as express the pairs: where every pair whose file module
  // starts with one first segment maps it to one other first segment, with
  // the rest the same, and no other key of the file starts with it, one
  // rule for all of them ("^head\." -> "classifier."); else one per module.
  std::map<std::string, std::set<std::string>> by_segment;  // file first segment -> model first segments
  std::map<std::string, bool> same_rest;
  for (const auto& [u, m] : pairs) {
    const std::string a = first_segment(u), b = first_segment(m);
    by_segment[a].insert(b);
    const bool rest = u.substr(a.size()) == m.substr(b.size());
    same_rest.emplace(a, true).first->second &= rest;
  }
  std::set<std::string> paired_modules;
  for (const auto& [u, m] : pairs) paired_modules.insert(u);
  auto only_paired_under = [&](const std::string& a) {
    for (const FitInput& in : inputs) {
      if (in.key.compare(0, a.size(), a) == 0 && paired_modules.count(module_of(in.key)) == 0) return false;
    }
    return true;
  };
  std::set<std::string> one_rule;
  for (const auto& [a, bs] : by_segment) {
    if (bs.size() == 1 && same_rest[a] && only_paired_under(a)) {
      one_rule.insert(a);
      advice.renames.emplace_back("^" + escaped(a), *bs.begin());
    }
  }
  for (const auto& [u, m] : pairs) {
    if (one_rule.count(first_segment(u)) == 0) advice.renames.emplace_back("^" + escaped(u), m);
    advice.inputs_paired += left[u].size();
    advice.entries_paired += wanted[m].size();
  }
  return advice;
}

}  // namespace ckptfix

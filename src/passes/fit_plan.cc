#include "passes/fit_plan.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "ckptfix/error.h"
#include "ckptfix/passes.h"
#include "model/state_dict_values.h"
#include "passes/key_regex.h"
#include "passes/name_index.h"

namespace ckptfix {
namespace {

// The wrapper modules' attribute names: DataParallel and DDP, torch.compile,
// FSDP (and early FSDP's flat-parameter wrapper), activation checkpointing.
constexpr std::string_view kWrapperSegments[] = {"module", "_orig_mod", "_fsdp_wrapped_module", "_fpw_module",
                                                 "_checkpoint_wrapped_module"};
// A prefix stripped or added has at most this many segments ("backbone.bottom_up." has 2).
constexpr size_t kMaxPrefixSegments = 3;
// Model keys sharing one tail beyond this many are too many to tell apart by
// a prefix (and would make the search quadratic): such tails are not used.
constexpr size_t kMaxKeysPerTail = 64;
// Every known rename changes a key's length by a few bytes at most
// (weight_g -> parametrizations.weight.original0 the most).
constexpr size_t kLongestRenameShrink = 32;

// Calls f(segment) for each of key's '.'-separated segments, in order.
template <typename F>
void for_each_segment(std::string_view key, F&& f) {
  size_t start = 0;
  for (size_t dot; (dot = key.find('.', start)) != std::string_view::npos; start = dot + 1) {
    f(key.substr(start, dot - start));
  }
  f(key.substr(start));
}

std::vector<std::string_view> segments(std::string_view key) {
  std::vector<std::string_view> out;
  out.reserve(static_cast<size_t>(std::count(key.begin(), key.end(), '.')) + 1);
  for_each_segment(key, [&](std::string_view s) { out.push_back(s); });
  return out;
}

// Whether `segment` is one of key's '.'-separated segments (no allocation:
// asked of every key of a 100,000-key model).
bool has_segment(std::string_view key, std::string_view segment) {
  for (size_t start = 0;;) {
    const size_t dot = key.find('.', start);
    if (key.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start) == segment) return true;
    if (dot == std::string_view::npos) return false;
    start = dot + 1;
  }
}

bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", \"" : "\"") + keys[i] + "\"";
  return out;
}

// The state of one plan as the rules run.
class Planner {
 public:
  Planner(const std::vector<FitInput>& inputs, const ModelReference& model, const FitOptions& options)
      : inputs_(inputs), model_(model), options_(options) {
    const size_t n = inputs.size(), m = model.entries.size();
    plan_.names.resize(n);
    plan_.rules.resize(n);
    plan_.module_moved.assign(n, false);
    plan_.placed.assign(n, -1);
    plan_.dropped_by.resize(n);
    plan_.source.assign(m, -1);
    plan_.made.assign(m, false);
    for (size_t i = 0; i < n; ++i) plan_.names[i] = inputs[i].key;
    index_ = NameIndex(m);
    for (size_t r = 0; r < m; ++r) {
      index_.emplace(model.entries[r].key, r);  // the first of a repeated key
      longest_model_key_ = std::max(longest_model_key_, model.entries[r].key.size());
      model_modules_[module_of(model.entries[r].key)].push_back(r);
    }
  }

  FitPlan run(bool rules) {
    if (rules) {
      drop_by_glob();
      rename_by_patterns();
    }
    place_exact();
    if (rules) {
      remove_wrapper_segments();
      // The known renames that place a key as it stands go first, so that a
      // key they explain never votes for a prefix (norm.1.weight is
      // norm1.weight, not another module's 1.weight); then again after the
      // prefix, for the keys it moved (bert.x.LayerNorm.gamma).
      known_renames(false);
      fit_one_prefix();
      known_renames(true);
      batches_tracked();
    }
    finish();
    return std::move(plan_);
  }

 private:
  size_t longest_model_key_ = 0;

  // "a.b.c" -> "a.b." (the module's prefix, "" for a key of the root module).
  static std::string module_of(const std::string& key) {
    const size_t dot = key.rfind('.');
    return dot == std::string::npos ? std::string() : key.substr(0, dot + 1);
  }

  // Whether the model's module at `prefix` is a norm by its shapes (LayerNorm,
  // RMSNorm, GroupNorm, BatchNorm and their kin): a 1-d weight, and every
  // other tensor of the module itself 1-d of that length (a BatchNorm's
  // num_batches_tracked aside). A FiLM layer's 2-d gamma, a Linear, a
  // layer-scale module with more than these, is none.
  bool is_norm(const std::string& prefix) const {
    const auto weight = model_key(prefix + "weight");
    if (!weight || !model_.entries[*weight].tensor || model_.entries[*weight].shape.size() != 1) return false;
    const int64_t length = model_.entries[*weight].shape[0];
    const auto members = model_modules_.find(prefix);
    if (members == model_modules_.end()) return false;
    return std::all_of(members->second.begin(), members->second.end(), [&](size_t r) {
      const ExpectedEntry& e = model_.entries[r];
      if (!e.tensor) return true;  // an extra state says nothing of the shapes
      if (e.key.size() - prefix.size() == std::string_view("num_batches_tracked").size() &&
          e.key.compare(prefix.size(), std::string::npos, "num_batches_tracked") == 0) {
        return e.shape.empty();
      }
      return e.shape.size() == 1 && e.shape[0] == length;
    });
  }

  bool alive(size_t i) const { return plan_.dropped_by[i].empty(); }
  bool open(size_t i) const { return alive(i) && plan_.placed[i] < 0; }

  std::optional<size_t> model_key(const std::string& name) const {
    return index_.find(name);
  }

  bool same_shape(size_t i, size_t r) const {
    const FitInput& in = inputs_[i];
    const ExpectedEntry& e = model_.entries[r];
    // A module's extra state is whatever get_extra_state gave (a uint8
    // tensor of any length for TransformerEngine's): load_state_dict hands
    // it to set_extra_state unchecked.
    if (is_extra_state_key(e.key)) return true;
    if (!in.tensor || !e.tensor) return in.tensor == e.tensor;
    // A 1-d tensor into a 0-dim parameter: torch takes its first element
    // (`input_param[0]`, for 0.3-era files), as load_verdict judges it.
    return in.shape == e.shape || (e.shape.empty() && in.shape.size() == 1 && in.shape[0] >= 1);
  }

  void note_rule(size_t i, const std::string& rule) {
    plan_.rules[i] += (plan_.rules[i].empty() ? "" : ", ") + rule;
  }

  // Input i takes model key r; a second taker is a collision (renames are one-to-one).
  void place(size_t i, size_t r) {
    if (plan_.source[r] >= 0 && static_cast<size_t>(plan_.source[r]) != i) {
      const auto other = static_cast<size_t>(plan_.source[r]);
      plan_.ambiguous.push_back("keys '" + inputs_[other].key + "' and '" + inputs_[i].key + "' would both become '" +
                                model_.entries[r].key + "'; leave one out with `drops` or rename it with `renames`");
      return;
    }
    plan_.source[r] = static_cast<int64_t>(i);
    plan_.placed[i] = static_cast<int64_t>(r);
  }

  // Renames open inputs to `proposed[i]` (a name, or "" for none) by
  // `rule`, then places those whose new name the model has; two inputs
  // renamed to one name collide.
  void rename_all(const std::vector<std::string>& proposed, const std::string& rule, bool moves_module) {
    // Names of plan_.names not renamed here, and of `proposed`: both stay as they are while it lives.
    NameIndex taken(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (alive(i) && (proposed[i].empty() || !open(i))) taken.emplace(plan_.names[i], i);
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (proposed[i].empty() || !open(i)) continue;
      const auto [other, added] = taken.emplace(proposed[i], i);
      if (!added) {
        plan_.ambiguous.push_back(rule + " makes keys '" + inputs_[other].key + "' and '" + inputs_[i].key +
                                  "' both '" + proposed[i] + "'; leave one out with `drops` or rename it with `renames`");
        continue;
      }
      plan_.names[i] = proposed[i];
      note_rule(i, rule);
      if (moves_module) plan_.module_moved[i] = true;
    }
    place_exact();
  }

  void place_exact() {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!open(i)) continue;
      if (const auto r = model_key(plan_.names[i])) place(i, *r);
    }
  }

  void drop_by_glob() {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      for (const std::string& g : options_.drops) {
        if (glob_match(g, inputs_[i].key)) {
          plan_.dropped_by[i] = "`drops` '" + g + "'";
          break;
        }
      }
    }
  }

  void rename_by_patterns() {
    for (const auto& rename : options_.renames) {
      // (named, not structured bindings: clang before 16 cannot capture those in a lambda)
      const std::string& pattern = rename.first;
      const std::string& replacement = rename.second;
      KeyRegex re = [&] {
        try {
          return KeyRegex::compile(pattern);
        } catch (Error& e) {
          throw Error(ErrorKind::kInvalidArgument, "`renames` '" + pattern + "': " + e.message());
        }
      }();
      try {
        re.check_replacement(replacement);
      } catch (Error& e) {
        throw Error(ErrorKind::kInvalidArgument, "`renames` '" + pattern + "=" + replacement + "': " + e.message());
      }
      std::vector<std::string> proposed(inputs_.size());
      for (size_t i = 0; i < inputs_.size(); ++i) {
        if (!alive(i)) continue;
        if (auto renamed = re.replace_all(plan_.names[i], replacement); renamed && *renamed != plan_.names[i]) {
          proposed[i] = std::move(*renamed);
        }
      }
      // Not rename_all: these run before anything is placed, on every key.
      // Names of plan_.names not renamed here, and of `proposed`: both stay as they are while it lives.
      NameIndex taken(inputs_.size());
      for (size_t i = 0; i < inputs_.size(); ++i) {
        if (alive(i) && proposed[i].empty()) taken.emplace(plan_.names[i], i);
      }
      for (size_t i = 0; i < inputs_.size(); ++i) {
        if (proposed[i].empty()) continue;
        const auto [other, added] = taken.emplace(proposed[i], i);
        if (!added) {
          plan_.ambiguous.push_back("`renames` '" + pattern + "' makes keys '" + inputs_[other].key + "' and '" +
                                    inputs_[i].key + "' both '" + proposed[i] + "' (renames are one-to-one)");
          continue;
        }
        plan_.names[i] = proposed[i];
        note_rule(i, "`renames` '" + pattern + "'");
        plan_.module_moved[i] = true;
      }
    }
  }

  void remove_wrapper_segments() {
    // The wrapper segments the model has nowhere.
    std::vector<std::string_view> removable;
    for (std::string_view w : kWrapperSegments) {
      const bool in_model = std::any_of(model_.entries.begin(), model_.entries.end(),
                                        [&](const ExpectedEntry& e) { return has_segment(e.key, w); });
      if (!in_model) removable.push_back(w);
    }
    std::vector<std::string> proposed(inputs_.size());
    std::map<std::string, std::vector<size_t>> by_removed;  // the segments removed ("module.") -> inputs
    std::string out, removed;
    std::vector<bool> named(removable.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!open(i)) continue;
      if (std::none_of(removable.begin(), removable.end(),
                       [&](std::string_view w) { return has_segment(plan_.names[i], w); })) {
        continue;
      }
      out.clear();
      removed.clear();
      std::fill(named.begin(), named.end(), false);  // each removed segment named once, in order
      for_each_segment(plan_.names[i], [&](std::string_view s) {
        const auto w = std::find(removable.begin(), removable.end(), s);
        if (w != removable.end()) {
          if (!named[static_cast<size_t>(w - removable.begin())]) removed.append(s) += '.';
          named[static_cast<size_t>(w - removable.begin())] = true;
          return;
        }
        if (!out.empty()) out += '.';
        out += s;
      });
      if (!removed.empty() && !out.empty()) {
        proposed[i] = out;
        by_removed[removed].push_back(i);
      }
    }
    for (const auto& [segments_removed, members] : by_removed) {
      std::vector<std::string> one(inputs_.size());
      for (size_t i : members) one[i] = std::move(proposed[i]);
      rename_all(one, "wrapper segment '" + segments_removed + "'", true);
    }
  }

  // Step 3: the one prefix change (strip P, add Q) that fits the most keys
  // by name and shape. A key votes for (its prefix -> a model key's) where
  // the rest of both is one tail of two segments or more and of one shape
  // (model.fc.weight -> fc.weight), or where its module and a model module
  // hold the same names of the same shapes (head.{weight,bias} ->
  // classifier.{weight,bias}); the prefixes' common last segments are
  // dropped (model.fc. -> fc. is model. -> ""). It needs support: two keys
  // at least, no other change with as many (a tie is refused), and, for a
  // prefix stripped, every open key under it fitting a model key by name
  // after the change (else the change is refused, naming the key); a
  // prefix only added moves the keys it makes fit and no others.
  void fit_one_prefix() {
    std::unordered_map<std::string, std::vector<std::pair<std::string, size_t>>> model_by_tail;  // tail -> (Q, r)
    std::unordered_set<std::string> crowded;
    for (size_t r = 0; r < model_.entries.size(); ++r) {
      if (plan_.source[r] >= 0) continue;
      for (const auto& [prefix, tail] : splits(model_.entries[r].key)) {
        if (crowded.count(tail)) continue;
        auto& list = model_by_tail[tail];
        if (list.size() >= kMaxKeysPerTail) {
          crowded.insert(tail);
          model_by_tail.erase(tail);
          continue;
        }
        list.emplace_back(prefix, r);
      }
    }
    // Modules by what they hold: signature -> the model's modules (unfilled entries).
    std::unordered_map<std::string, std::vector<std::string>> model_by_signature;
    {
      std::unordered_map<std::string, std::vector<size_t>> members;
      for (size_t r = 0; r < model_.entries.size(); ++r) {
        if (plan_.source[r] < 0) members[module_of(model_.entries[r].key)].push_back(r);
      }
      std::unordered_set<std::string> crowded_signatures;
      for (const auto& [module, entries] : members) {
        const std::string signature = model_signature(module, entries);
        if (crowded_signatures.count(signature)) continue;
        auto& list = model_by_signature[signature];
        if (list.size() >= kMaxKeysPerTail) {
          crowded_signatures.insert(signature);
          model_by_signature.erase(signature);
          continue;
        }
        list.push_back(module);
      }
    }
    std::unordered_map<std::string, std::string> input_signatures;  // open inputs' modules -> signature
    {
      std::unordered_map<std::string, std::vector<size_t>> members;
      for (size_t i = 0; i < inputs_.size(); ++i) {
        if (open(i)) members[module_of(plan_.names[i])].push_back(i);
      }
      for (const auto& [module, entries] : members) input_signatures[module] = input_signature(module, entries);
    }
    std::map<std::pair<std::string, std::string>, size_t> votes;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!open(i)) continue;
      std::set<std::pair<std::string, std::string>> mine;  // one vote per key and change
      for (const auto& [prefix, tail] : splits(plan_.names[i])) {
        const auto found = model_by_tail.find(tail);
        if (found == model_by_tail.end()) continue;
        for (const auto& [model_prefix, r] : found->second) {
          if (!same_shape(i, r)) continue;
          auto change = without_shared_tail(prefix, model_prefix);
          if (change.first.empty() && change.second.empty()) continue;
          mine.insert(std::move(change));
        }
      }
      const std::string module = module_of(plan_.names[i]);
      if (const auto found = model_by_signature.find(input_signatures.at(module)); found != model_by_signature.end()) {
        for (const std::string& model_module : found->second) {
          auto change = without_shared_tail(module, model_module);
          if (change.first.empty() && change.second.empty()) continue;
          mine.insert(std::move(change));
        }
      }
      for (const auto& change : mine) ++votes[change];
    }
    if (votes.empty()) return;
    auto best = votes.begin();
    for (auto it = votes.begin(); it != votes.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    // One key's vote is a coincidence of a name and a shape, not a prefix.
    if (best->second < 2) return;
    std::vector<std::pair<std::string, std::string>> tied;
    for (const auto& [change, count] : votes) {
      if (count == best->second) tied.push_back(change);
    }
    if (tied.size() > 1) {
      std::string list;
      for (size_t k = 0; k < tied.size() && k < 4; ++k) list += (k ? "; " : "") + describe(tied[k]);
      plan_.ambiguous.push_back(std::to_string(best->second) + " keys fit the model as well by one prefix change as "
                                "by another (" + list + "); say which with `renames`");
      return;
    }
    // The keys under the prefix move, not only those that match as they
    // are: the known renames still to come work on the moved names.
    const auto& [strip, add] = best->first;
    std::vector<std::string> proposed(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!open(i) || plan_.names[i].compare(0, strip.size(), strip) != 0 || plan_.names[i].size() == strip.size()) {
        continue;
      }
      std::string moved = add + plan_.names[i].substr(strip.size());
      if (!fits_by_name(moved) && !is_batches_tracked(moved)) {
        if (strip.empty()) continue;  // a prefix only added leaves what it does not fit as it is
        plan_.ambiguous.push_back(describe(best->first) + " fits " + std::to_string(best->second) +
                                  " keys, but '" + inputs_[i].key + "' under it would be '" + moved +
                                  "', which the model has not: leave it out with `drops` or say the renames with `renames`");
        return;
      }
      proposed[i] = std::move(moved);
    }
    rename_all(proposed, describe(best->first), true);
  }

  // Whether the model has `name`, or a name a known rename makes of it.
  bool fits_by_name(const std::string& name) const {
    if (model_key(name)) return true;
    if (name.size() > longest_model_key_ + kLongestRenameShrink) return false;
    for (const auto& candidate : rename_candidates(name)) {
      if (model_key(candidate.first)) return true;
    }
    return false;
  }

  static bool is_batches_tracked(const std::string& name) {
    constexpr std::string_view kTracked = ".num_batches_tracked";
    return name.size() > kTracked.size() && name.compare(name.size() - kTracked.size(), kTracked.size(), kTracked) == 0;
  }

  // What a module holds, as names within it and shapes: "bias:5;weight:5,4".
  static std::string signature_of(std::vector<std::pair<std::string_view, std::string>> leaves) {
    std::sort(leaves.begin(), leaves.end());
    std::string out;
    for (const auto& [leaf, shape] : leaves) (((out += leaf) += ':') += shape) += ';';
    return out;
  }

  static std::string shape_text(bool tensor, const std::vector<int64_t>& shape) {
    if (!tensor) return "state";
    std::string out = "[";
    for (int64_t d : shape) (out += std::to_string(d)) += ',';
    return out + "]";
  }

  std::string model_signature(const std::string& module, const std::vector<size_t>& entries) const {
    std::vector<std::pair<std::string_view, std::string>> leaves;
    for (size_t r : entries) {
      const ExpectedEntry& e = model_.entries[r];
      leaves.emplace_back(std::string_view(e.key).substr(module.size()), shape_text(e.tensor, e.shape));
    }
    return signature_of(std::move(leaves));
  }

  std::string input_signature(const std::string& module, const std::vector<size_t>& members) const {
    std::vector<std::pair<std::string_view, std::string>> leaves;
    for (size_t i : members) {
      leaves.emplace_back(std::string_view(plan_.names[i]).substr(module.size()),
                          shape_text(inputs_[i].tensor, inputs_[i].shape));
    }
    return signature_of(std::move(leaves));
  }

  static std::string describe(const std::pair<std::string, std::string>& change) {
    if (change.second.empty()) return "prefix '" + change.first + "' removed";
    if (change.first.empty()) return "prefix '" + change.second + "' added";
    return "prefix '" + change.first + "' -> '" + change.second + "'";
  }

  // (prefix, tail) splits of `key` at its first dots: the whole key as a
  // tail, and each prefix of 1..kMaxPrefixSegments segments that leaves a
  // tail of two segments or more.
  static std::vector<std::pair<std::string, std::string>> splits(const std::string& key) {
    std::vector<std::pair<std::string, std::string>> out{{"", key}};
    size_t at = 0;
    for (size_t k = 0; k < kMaxPrefixSegments; ++k) {
      const size_t dot = key.find('.', at);
      if (dot == std::string::npos) break;
      const std::string tail = key.substr(dot + 1);
      if (tail.find('.') == std::string::npos) break;  // a tail of one segment ("weight") tells nothing
      out.emplace_back(key.substr(0, dot + 1), tail);
      at = dot + 1;
    }
    return out;
  }

  // The names the known renames (step 4) offer `name`, each with its rule.
  std::vector<std::pair<std::string, std::string>> rename_candidates(const std::string& name) const {
    std::vector<std::pair<std::string, std::string>> candidates;  // (name, rule)
    const std::vector<std::string_view> segs = segments(name);
    const std::string_view last = segs.back();
    const std::string head = name.substr(0, name.size() - last.size());
    // gamma/beta only into a module the reference shows to be a norm.
    if ((last == "gamma" || last == "beta") && is_norm(head)) {
      if (last == "gamma") candidates.emplace_back(head + "weight", "gamma -> weight (a norm's)");
      if (last == "beta") candidates.emplace_back(head + "bias", "beta -> bias (a norm's)");
    }
    if (last == "weight_g") candidates.emplace_back(head + "parametrizations.weight.original0", "weight_norm (old -> new)");
    if (last == "weight_v") candidates.emplace_back(head + "parametrizations.weight.original1", "weight_norm (old -> new)");
    constexpr std::string_view kParam = "parametrizations.weight.original";
    if (name.size() > kParam.size() + 1 && name.compare(name.size() - kParam.size() - 1, kParam.size(), kParam) == 0 &&
        (name.back() == '0' || name.back() == '1')) {
      const std::string base = name.substr(0, name.size() - kParam.size() - 1);
      candidates.emplace_back(base + (name.back() == '0' ? "weight_g" : "weight_v"), "weight_norm (new -> old)");
    }
    // A digit segment joined to the one before it (norm.1 -> norm1), or split off (norm1 -> norm.1).
    for (size_t k = 0; k + 1 < segs.size(); ++k) {
      if (!is_digits(segs[k + 1]) || segs[k].empty() || is_digits(segs[k].substr(segs[k].size() - 1))) continue;
      std::string joined;
      for (size_t j = 0; j < segs.size(); ++j) {
        if (j == k + 1) continue;
        joined += (joined.empty() ? "" : ".") + std::string(segs[j]) + (j == k ? std::string(segs[k + 1]) : "");
      }
      candidates.emplace_back(joined, "digit segment joined");
    }
    for (size_t k = 0; k < segs.size(); ++k) {
      const std::string_view s = segs[k];
      size_t d = s.size();
      while (d > 0 && s[d - 1] >= '0' && s[d - 1] <= '9') --d;
      if (d == 0 || d == s.size()) continue;
      std::string split;
      for (size_t j = 0; j < segs.size(); ++j) {
        split += (split.empty() ? "" : ".") +
                 (j == k ? std::string(s.substr(0, d)) + "." + std::string(s.substr(d)) : std::string(segs[j]));
      }
      candidates.emplace_back(split, "digit segment split");
    }
    return candidates;
  }

  // Step 4: renames from torch's own history and the libraries', each
  // applied only where the model has the target, unfilled. A key with
  // several candidates is an ambiguity when `final`, else left for later.
  void known_renames(bool final) {
    std::vector<std::string> proposed(inputs_.size());
    std::map<std::string, std::vector<size_t>> by_rule;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!open(i)) continue;
      const std::string& name = plan_.names[i];
      // Every rename below changes a key's length by a few bytes at most
      // (weight_g -> parametrizations.weight.original0 the most): a key far
      // longer than any of the model's can become none of them, and its
      // candidates (a copy of the key per segment) would cost its length
      // times its segments.
      if (name.size() > longest_model_key_ + kLongestRenameShrink) continue;
      const auto candidates = rename_candidates(name);
      // The candidates the model has, unfilled; of those of the key's shape, one.
      std::vector<std::pair<std::string, std::string>> named, shaped;
      for (auto& [candidate, rule] : candidates) {
        const auto r = model_key(candidate);
        if (!r || plan_.source[*r] >= 0) continue;
        named.emplace_back(candidate, rule);
        if (same_shape(i, *r)) shaped.emplace_back(candidate, rule);
      }
      const auto& choice = shaped.empty() ? named : shaped;
      if (choice.size() == 1) {
        proposed[i] = choice.front().first;
        by_rule[choice.front().second].push_back(i);
      } else if (choice.size() > 1 && final) {
        std::vector<std::string> names;
        for (const auto& c : choice) names.push_back(c.first);
        plan_.ambiguous.push_back("key '" + inputs_[i].key + "' could go to " + std::to_string(names.size()) +
                                  " keys of the model: " + quoted_list(names) + "; say which with `renames`");
      }
    }
    for (const auto& [rule, members] : by_rule) {
      std::vector<std::string> one(inputs_.size());
      for (size_t i : members) one[i] = proposed[i];
      rename_all(one, rule, rule.rfind("digit", 0) == 0);  // gamma -> weight, weight_norm: the same module
    }
  }

  // A BatchNorm's num_batches_tracked: made where the model has it and the
  // file's running_mean beside it is placed (what torch itself does for a
  // BatchNorm saved before version 2); left out where the model has none.
  void batches_tracked() {
    constexpr std::string_view kTracked = "num_batches_tracked";
    for (size_t r = 0; r < model_.entries.size(); ++r) {
      const std::string& key = model_.entries[r].key;
      if (plan_.source[r] >= 0 || key.size() < kTracked.size() ||
          key.compare(key.size() - kTracked.size(), kTracked.size(), kTracked) != 0) {
        continue;
      }
      const std::string head = key.substr(0, key.size() - kTracked.size());
      if (!head.empty() && head.back() != '.') continue;
      if (const auto mean = model_key(head + "running_mean"); mean && plan_.source[*mean] >= 0) plan_.made[r] = true;
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const std::string& name = plan_.names[i];
      if (!open(i) || name.size() < kTracked.size() ||
          name.compare(name.size() - kTracked.size(), kTracked.size(), kTracked) != 0) {
        continue;
      }
      const size_t head = name.size() - kTracked.size();
      if (head > 0 && name[head - 1] != '.') continue;  // x.my_num_batches_tracked is no BatchNorm's
      if (model_key(name)) continue;  // the model has it: left for the refusal to name
      plan_.dropped_by[i] = "num_batches_tracked, which the model has not";
    }
  }

  void finish() {
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (!alive(i)) {
        plan_.names[i].clear();
        continue;
      }
      if (plan_.placed[i] < 0) {
        plan_.unexpected.push_back(i);
      } else if (!same_shape(i, static_cast<size_t>(plan_.placed[i]))) {
        plan_.mismatched.push_back(i);
      } else {
        ++plan_.fitted;
      }
    }
    for (size_t r = 0; r < model_.entries.size(); ++r) {
      if (plan_.source[r] < 0 && !plan_.made[r]) plan_.missing.push_back(r);
    }
  }

  const std::vector<FitInput>& inputs_;
  const ModelReference& model_;
  const FitOptions& options_;
  FitPlan plan_;
  NameIndex index_;  // model_'s keys (the first of a repeated one)
  std::unordered_map<std::string, std::vector<size_t>> model_modules_;  // module prefix -> its own entries
};

}  // namespace

bool FitPlan::acceptable(const FitOptions& options) const {
  return ambiguous.empty() && (missing.empty() || options.allow_missing) &&
         (unexpected.empty() || options.drop_unexpected) && (mismatched.empty() || options.drop_mismatched);
}

FitPlan plan_fit(const std::vector<FitInput>& inputs, const ModelReference& model, const FitOptions& options,
                 bool rules) {
  return Planner(inputs, model, options).run(rules);
}

std::pair<std::string, std::string> without_shared_tail(std::string strip, std::string add) {
  while (!strip.empty() && !add.empty()) {
    const size_t a = strip.rfind('.', strip.size() - 2), b = add.rfind('.', add.size() - 2);
    const std::string last_a = strip.substr(a == std::string::npos ? 0 : a + 1);
    const std::string last_b = add.substr(b == std::string::npos ? 0 : b + 1);
    // (an empty segment, a key starting with '.', ends it: nothing would be dropped)
    if (last_a != last_b || last_a.size() < 2) break;
    strip.resize(strip.size() - last_a.size());
    add.resize(add.size() - last_b.size());
  }
  return {strip, add};
}

std::string torch_size_text(const std::vector<int64_t>& shape) {
  std::string out = "torch.Size([";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "])";
}

std::vector<std::string> refusal_lines(const FitPlan& plan, const std::vector<FitInput>& inputs,
                                       const ModelReference& model, const FitOptions& options) {
  std::vector<std::string> lines = plan.ambiguous;
  if (!plan.missing.empty() && !options.allow_missing) {
    std::vector<std::string> keys;
    for (size_t r : plan.missing) keys.push_back(model.entries[r].key);
    lines.push_back("Missing key(s) in state_dict: " + quoted_list(keys) +
                    ". (`allow_missing` writes the rest, for load_state_dict(strict=False))");
  }
  if (!plan.unexpected.empty() && !options.drop_unexpected) {
    std::vector<std::string> keys;
    for (size_t i : plan.unexpected) keys.push_back(inputs[i].key);
    lines.push_back("Unexpected key(s) in state_dict: " + quoted_list(keys) + ". (`drop_unexpected` leaves them out)");
  }
  if (!options.drop_mismatched) {
    for (size_t i : plan.mismatched) {
      const ExpectedEntry& e = model.entries[static_cast<size_t>(plan.placed[i])];
      lines.push_back("size mismatch for " + e.key + ": copying a param with shape " + torch_size_text(inputs[i].shape) +
                      " from checkpoint, the shape in current model is " + torch_size_text(e.shape) +
                      ". (`drop_mismatched` leaves it out)");
    }
  }
  return lines;
}

}  // namespace ckptfix

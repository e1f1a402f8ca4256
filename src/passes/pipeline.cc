// apply_passes: the fixed order of the passes, and option validation.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "ckptfix/error.h"
#include "model/checkpoint_impl.h"
#include "model/payloads.h"
#include "model/state_dict_values.h"
#include "error_boundary.h"
#include "ckptfix/prefixes.h"
#include "passes/passes_internal.h"
#include "passes/key_regex.h"
#include "passes/rename_keys.h"

namespace ckptfix {

namespace {

// The fit chooses prefixes itself and makes the state dict the root.
void check_fit_options(const PassOptions& options) {
  auto usage = [](const std::string& message) { return Error(ErrorKind::kInvalidArgument, message); };
  const FitOptions& fit = options.fit;
  if (!options.like) {
    if (!fit.renames.empty() || !fit.drops.empty() || fit.allow_missing || fit.drop_unexpected || fit.drop_mismatched ||
        fit.dtype_like) {
      throw usage("`renames`, `drops`, `allow_missing`, `drop_unexpected`, `drop_mismatched` and `dtype_like` go with `like`");
    }
    return;
  }
  if (!options.strip_prefixes.empty() || options.auto_strip || !options.add_prefix.empty()) {
    throw usage("`like` chooses the prefixes itself: give no `strip_prefixes`, `auto_strip` or `add_prefix` with it "
                "(`renames` says what it cannot know)");
  }
  if (options.extract) throw usage("`like` makes the state dict the root: give no `extract` with it");
  if (options.keys.size() > 1) throw usage("`like` fits one state dict: give at most one of `keys`");
  if (fit.dtype_like && options.cast_to) throw usage("use either `dtype_like` or `cast_to`, not both");
  for (const auto& [pattern, replacement] : fit.renames) {
    try {
      KeyRegex::compile(pattern).check_replacement(replacement);
    } catch (const Error& e) {
      throw usage("`renames` '" + pattern + "=" + replacement + "': " + e.message());
    }
  }
  for (const std::string& g : fit.drops) {
    if (g.empty()) throw usage("`drops` needs a non-empty glob");
  }
}

void check_pass_options(const PassOptions& options) {
  auto usage = [](const std::string& message) { return Error(ErrorKind::kInvalidArgument, message); };
  if (options.to_device && !options.device_map.empty()) {
    throw usage("use either `to_device` (every storage) or `device_map` (matching storages), not both");
  }
  if (options.to_device) validate_device(*options.to_device);
  for (const auto& [from, to] : options.device_map) {
    validate_device(from);
    validate_device(to);
  }
  if (options.drop_unknown && !options.weights_only) throw usage("`drop_unknown` goes with `weights_only`");
  if (options.torch) modeled_torch_version(*options.torch);
  if (options.cast_to && !is_cast_type(*options.cast_to)) {
    throw usage("cannot cast to " + std::string(dtype_name(*options.cast_to)) +
                ": the target must be float16, bfloat16, float32, float64, float8_e4m3fn or float8_e5m2");
  }
  for (DType d : options.cast_from) {
    if (!is_cast_type(d)) {
      throw usage("`cast_from` " + std::string(dtype_name(d)) +
                  ": only float16, bfloat16, float32, float64, float8_e4m3fn and float8_e5m2 are cast");
    }
  }
  if (options.for_libtorch && options.keys.size() > 1) {
    throw usage("`for_libtorch` writes one state dict: give at most one of `keys`");
  }
  if ((!options.cast_from.empty() || !options.keep.empty()) && !options.cast_to) {
    throw usage("`cast_from` and `keep` need `cast_to`");
  }
  for (const std::string& g : options.keep) {
    if (g.empty()) throw usage("`keep` needs a non-empty glob");
    size_t open = 0;
    for (char c : g) open = c == '[' ? open + 1 : c == ']' && open ? open - 1 : open;
    if (open) throw usage("`keep` '" + g + "': unclosed '[' in glob");
  }
  for (const std::string& p : options.strip_prefixes) {
    if (p.empty()) throw usage("`strip_prefixes` needs a non-empty prefix");
  }
  check_fit_options(options);
}

// A tensor of a dtype `torch` cannot load (one newer than it) fails the
// input, naming the first such tensor: the output would not load there.
void refuse_dtypes_not_loading(Checkpoint& checkpoint, TorchVersion torch) {
  const CheckpointImpl& impl = impl_of(checkpoint);
  std::vector<std::string> names;
  for (size_t i = 0; i < impl.tensors.size(); ++i) {
    const DType d = impl.tensors[i].dtype;
    const TorchVersion since = first_torch_loading(d);
    if (since <= torch) continue;
    if (names.empty()) names = tensor_names(checkpoint);
    throw Error(ErrorKind::kUnsupported, "tensor '" + names[i] + "' is " + std::string(dtype_name(d)) + ", which torch " +
                                             torch.str() + " cannot load (torch loads it from " + since.str() +
                                             " on); give a newer `torch`" +
                                             (is_cast_type(d) ? std::string(", or cast it") : std::string()));
  }
}

// What the output's pickle names must exist in the torch it is for: torch
// 1.13 lacks _rebuild_parameter_with_state (a Parameter with Python
// attributes becomes a plain _rebuild_parameter, its attributes left out,
// as a warning says) and every global of 2.x's (global_lists.h).
void fit_globals_to(Checkpoint& checkpoint, TorchVersion torch, PassReport& report) {
  if (weights_only_by_default(torch)) return;
  CheckpointImpl& impl = impl_of(checkpoint);
  std::vector<std::string> names;
  for (size_t i = 0; i < impl.tensors.size(); ++i) {
    Tensor& t = impl.tensors[i];
    if (!t.parameter || !t.value->is_call_to("torch._utils", "_rebuild_parameter_with_state")) continue;
    const auto& a = t.value->args()->items;  // (data, requires_grad, hooks, state)
    t.value->callable() = impl.graph.make_global("torch._utils", "_rebuild_parameter");
    t.value->args() = impl.graph.make_tuple({a[0], a[1], a[2]});
    if (t.python_attributes) {
      if (names.empty()) names = tensor_names(checkpoint);
      report.warnings.push_back("the Python attributes of Parameter '" + names[i] + "' are left out: torch " +
                                torch.str() + " has no _rebuild_parameter_with_state to set them");
      t.python_attributes = false;
    }
  }
  for (const GlobalRef& g : checkpoint.reachable_globals()) {
    if (g.exists_in_torch_1_13) continue;
    throw Error(ErrorKind::kUnsupported, "the output would name '" + g.dotted() + "', which torch " + torch.str() +
                                             " does not have (its torch.load would fail on it); give a newer `torch`");
  }
}

// A key renamed several times (strip _orig_mod., then module., then add a
// prefix) is one rename, from its name in the input to its name in the
// output; a key that ends where it began is no rename.
void collapse_renames(std::vector<KeyRename>& renames) {
  std::map<std::pair<std::string, std::string>, size_t> by_current;  // (dict, name now) -> rename
  std::vector<KeyRename> out;
  for (KeyRename& r : renames) {
    const std::string dict = path_to_string(r.dict);
    const auto it = by_current.find({dict, r.from});
    if (it == by_current.end()) {
      by_current[{dict, r.to}] = out.size();
      out.push_back(std::move(r));
      continue;
    }
    const size_t index = it->second;
    by_current.erase(it);
    out[index].to = r.to;
    by_current[{dict, r.to}] = index;
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const KeyRename& r) { return r.from == r.to; }), out.end());
  renames = std::move(out);
}

// Whether the passes that edit state dicts would change something of `dict`
// (a dict that is not one): a key starting with a prefix to strip, keys
// sharing a wrapper prefix, a key without the prefix to add, a tensor of a
// type to cast.
bool would_edit(const CheckpointImpl& impl, const Value& dict, const PassOptions& options) {
  std::vector<std::string> keys;
  bool castable = false;
  for (const auto& [k, v] : dict.entries()) {
    if (!k->is_str()) continue;
    keys.push_back(k->text);
    const Tensor* t = impl.tensor_of(v);
    if (t == nullptr || !options.cast_to || t->dtype == *options.cast_to || !is_cast_type(t->dtype)) continue;
    castable |= options.cast_from.empty() ||
                std::find(options.cast_from.begin(), options.cast_from.end(), t->dtype) != options.cast_from.end();
  }
  const auto starts_with = [](const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; };
  for (const std::string& key : keys) {
    for (const std::string& p : options.strip_prefixes) {
      if (starts_with(key, p)) return true;
    }
    if (!options.add_prefix.empty() && !starts_with(key, options.add_prefix)) return true;
  }
  return castable || (options.auto_strip && !shared_wrapper_prefix(keys).empty());
}

// The first dotted segment every key has where it holds modules, not
// tensors: "model." of model.fc.weight and model.fc.bias, but not "fc." of
// fc.weight and fc.bias (a model of one Linear). "" when there is none.
std::string common_first_segment(const std::vector<std::string>& keys) {
  const size_t dot = keys.front().find('.');
  if (dot == std::string::npos) return "";
  const std::string first = keys.front().substr(0, dot + 1);
  for (const std::string& k : keys) {
    if (k.compare(0, first.size(), first) != 0 || k.find('.', first.size()) == std::string::npos) return "";
  }
  return first;
}

// The passes that edit state dicts were asked for and did nothing: say why
// (Error kConflict), where the file has keys they were meant for, instead
// of letting the file through as "nothing to change"; so is an explicit
// prefix no key has, or one to add that every key has. A file that is
// simply already as asked by `auto_strip` or a cast is unchanged, not an
// error.
void refuse_what_was_not_done(const CheckpointImpl& impl, const PassOptions& options,
                              const std::vector<TargetDict>& dicts, const PassReport& report) {
  const bool edits_dicts = !options.strip_prefixes.empty() || options.auto_strip || !options.add_prefix.empty() ||
                           options.cast_to.has_value();
  if (!edits_dicts) return;
  if (dicts.empty()) {
    // No state dict, but a dict of tensors that is not one, which the passes
    // would have edited were it one: say which, and why it is not.
    for (const NotAStateDict& d : dicts_of_tensors_not_state_dicts(impl)) {
      if (!would_edit(impl, *d.dict, options)) continue;
      throw Error(ErrorKind::kConflict, "the checkpoint holds no state dict" + d.reason() +
                                            ", so nothing was done; `keys`='" + d.path + "' edits it anyway");
    }
    return;
  }
  if (!report.renames.empty()) return;
  const bool strip = !options.strip_prefixes.empty();
  if (!strip && options.add_prefix.empty()) return;
  // An explicit prefix matched no key (or every key already has the one to
  // add): the user's idea of the keys is wrong, and "nothing to change"
  // would hide it (issue 67: a Lightning file's `model.` keys "stripped" of
  // `module.`, exit 0, loaded nothing). Say what the keys do share.
  for (const TargetDict& d : dicts) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : d.dict->entries()) {
      if (k->is_str()) keys.push_back(k->text);
    }
    if (keys.empty()) continue;
    const std::string where = "'" + (d.path.empty() ? std::string("<root>") : path_to_string(d.path)) + "'";
    if (!strip) {
      throw Error(ErrorKind::kConflict, "every key of " + where + " already starts with '" + options.add_prefix +
                                            "': there is nothing to add; nothing was written");
    }
    std::string asked;
    for (const std::string& p : options.strip_prefixes) asked += (asked.empty() ? "'" : ", '") + p + "'";
    const std::string wrapper = shared_wrapper_prefix(keys);
    if (!wrapper.empty()) {
      const std::string first = wrapper.substr(0, wrapper.find('.') + 1);
      throw Error(ErrorKind::kConflict,
                  "no key starts with " + asked + ", but every key of " + where + " starts with the wrapper prefix '" +
                      wrapper + "': strip it with `strip_prefixes`='" + first + "'" +
                      (wrapper != first ? " (and then the next), or all of it with `auto_strip`" : " or `auto_strip`") +
                      "; nothing was written");
    }
    // Not a wrapper torch adds, but a prefix every key has (Lightning's
    // `model.`, Hugging Face's `bert.`): name it, and the fit to a model.
    const std::string shared = common_first_segment(keys);
    if (!shared.empty()) {
      throw Error(ErrorKind::kConflict, "no key starts with " + asked + "; every key of " + where + " starts with '" +
                                            shared + "' instead: strip that with `strip_prefixes`='" + shared +
                                            "', or fit the keys to the model with `like`; nothing was written");
    }
    std::string sample = "'" + keys[0] + "'";
    if (keys.size() > 1) sample += ", '" + keys[1] + "'" + (keys.size() > 2 ? ", ..." : "");
    throw Error(ErrorKind::kConflict, "no key of " + where + " starts with " + asked + " (its keys are " + sample +
                                          "): there is nothing to strip; nothing was written");
  }
}

PassReport run_passes(Checkpoint& checkpoint, const PassOptions& given) {
  CheckpointImpl& impl = impl_of(checkpoint);
  PassReport report;
  // 0. weights-only repair: the other passes see plain data (a pickled
  // module is now its state dict, which --key and the renames can name).
  // Payloads left in the file are read in first, except by the repair,
  // which reads in what it does not turn into storages (model/payloads.h).
  if (given.weights_only) {
    make_weights_only(checkpoint, given, report);
  } else if (impl.payloads_in_file) {  // else no walk: a graph of 100,000 tensors has 1.5M values
    read_in_payloads(impl);
  }
  // 0. fit to a model: the state dict, fitted, becomes the root, which the
  // passes after it edit (the `keys` that chose it name it no more).
  PassOptions fitted;
  if (given.like) {
    fit_state_dict(checkpoint, given, report);
    fitted = given;
    fitted.keys.clear();
  }
  const PassOptions& options = given.like ? fitted : given;
  // 0. extract: what the user keeps becomes the root; the writer then
  // writes only the storages still reachable.
  if (options.extract) {
    Value* value = find_path(impl, *options.extract);
    if (value == nullptr) {
      throw Error(ErrorKind::kInvalidArgument, "`extract` '" + *options.extract + "' names nothing in this checkpoint");
    }
    if (value != impl_of(checkpoint).root) {
      impl_of(checkpoint).root = value;
      report.extracted = *options.extract;
    }
  }
  const std::vector<TargetDict> dicts = select_dicts(impl, options.keys);
  for (const TargetDict& d : dicts) report.dicts.push_back(d.path);

  // 1. strip prefixes, 2. add a prefix
  for (const TargetDict& d : dicts) {
    for (const std::string& p : options.strip_prefixes) strip_prefix(impl_of(checkpoint).graph, *d.dict, d.path, p, report);
    if (options.auto_strip) {
      std::string chain;
      for (std::string prefix;;) {
        std::vector<std::string> keys;
        for (const auto& [k, v] : d.dict->entries()) {
          if (k->is_str()) keys.push_back(k->text);
        }
        prefix = shared_wrapper_prefix(keys);
        if (prefix.empty()) break;
        // One wrapper at a time, outermost first, each exactly as torch strips it.
        const std::string first = prefix.substr(0, prefix.find('.') + 1);
        strip_prefix(impl_of(checkpoint).graph, *d.dict, d.path, first, report);
        chain += first;
      }
      if (!chain.empty()) {
        report.auto_stripped.push_back((d.path.empty() ? std::string("<root>") : path_to_string(d.path)) + ": " + chain);
      }
    }
    add_prefix(impl_of(checkpoint).graph, *d.dict, d.path, options.add_prefix, report);
  }
  collapse_renames(report.renames);

  // 3. remap devices: every storage, or those of the tensors in --key dicts.
  if (options.to_device || !options.device_map.empty()) {
    std::vector<size_t> storages;
    if (options.keys.empty()) {
      for (size_t i = 0; i < impl_of(checkpoint).storages.size(); ++i) storages.push_back(i);
    } else {
      std::unordered_set<size_t> seen;
      for (const TargetTensor& t : select_tensors(impl, dicts)) {
        const int32_t storage = impl_of(checkpoint).tensors[t.tensor].storage;
        if (storage < 0) continue;  // a meta tensor has none
        const size_t s = static_cast<size_t>(storage);
        if (seen.insert(s).second) storages.push_back(s);
      }
    }
    remap_devices(checkpoint, storages, options, report);
  }

  // 4. cast
  if (options.cast_to) plan_cast(checkpoint, select_tensors(impl, dicts, ExtraStates::kSkip), options, report);

  // 5. for LibTorch
  if (options.for_libtorch) make_libtorch_state_dict(checkpoint, options, report);

  // 6. the output's dtypes and globals, for the torch release it is for
  if (options.torch) {
    refuse_dtypes_not_loading(checkpoint, *options.torch);
    fit_globals_to(checkpoint, *options.torch, report);
  }
  refuse_what_was_not_done(impl, options, dicts, report);
  return report;
}

}  // namespace

ValidPassOptions::ValidPassOptions(PassOptions options) : options_(std::move(options)) {}

ValidPassOptions validate_pass_options(PassOptions options) {
  check_pass_options(options);
  return ValidPassOptions(std::move(options));
}

PassReport apply_passes(Checkpoint& checkpoint, const ValidPassOptions& options) {
  return error_boundary(checkpoint.file_name(), [&] { return run_passes(checkpoint, options.options()); });
}

PassReport apply_passes(Checkpoint& checkpoint, const PassOptions& options) {
  return apply_passes(checkpoint, validate_pass_options(options));
}

}  // namespace ckptfix

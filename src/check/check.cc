// check_file: the rules of include/ckptfix/check.h.
#include "ckptfix/check.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "ckptfix/error.h"
#include "ckptfix/nested.h"
#include "ckptfix/passes.h"
#include "ckptfix/stats.h"
#include "error_boundary.h"
#include "model/checkpoint_impl.h"
#include "model/dict_selection.h"

namespace ckptfix {
namespace {

std::string comma_list(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s;
}

bool trusted(const std::vector<std::string>& patterns, const std::string& global) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return glob_match(p, global); });
}

// The releases of `torch` (sorted) for which `refuses` holds, as text:
// "2.6", "2.6 and 2.11", "2.6, 2.11 and 2.13".
template <typename F>
std::string refusing(const std::vector<TorchVersion>& torch, F&& refuses) {
  std::vector<std::string> names;
  for (const TorchVersion& v : torch) {
    if (refuses(v)) names.push_back(v.str());
  }
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

// What the default torch.load of each release refuses, less the globals the project trusts.
void check_weights_only(const CheckOptions& options, const Checkpoint& ck, const std::vector<TorchVersion>& torch,
                        const WeightsOnlyVerdict& verdict, std::vector<CheckViolation>& found) {
  for (const GlobalRef& g : ck.globals()) {
    if (trusted(options.allow_globals, g.dotted())) continue;
    // torch 1.13 loads with weights_only=False: a global it lacks fails the
    // load; one ckptfix does not know loads by running its code, which a
    // gate flags all the same.
    const std::string missing =
        refusing(torch, [&](TorchVersion v) { return !weights_only_by_default(v) && !g.exists_in_torch_1_13; });
    if (!missing.empty()) {
      const std::string why = " in torch " + missing + ", whose torch.load therefore fails on it";
      found.push_back({"global '" + g.dotted() + "'", "does not exist" + why,
                       CheckViolation::OneOfMany{"globals", g.dotted(), "do not exist" + why}});
    }
    const std::string runs = refusing(torch, [&](TorchVersion v) {
      return !weights_only_by_default(v) && g.exists_in_torch_1_13 && g.kind == GlobalKind::kUnknown;
    });
    if (!runs.empty()) {
      const std::string why = " ckptfix does not know: the default torch.load of torch " + runs +
                              " (weights_only=False) imports ";
      found.push_back({"global '" + g.dotted() + "'", "is a global" + why + "it and runs its code",
                       CheckViolation::OneOfMany{"globals", g.dotted(), "are globals" + why + "them and runs their code"}});
    }
    std::vector<TorchVersion> weights_only_releases;
    for (const TorchVersion& v : torch) {
      if (weights_only_by_default(v)) weights_only_releases.push_back(v);
    }
    const std::string releases = refusing(weights_only_releases, [&](TorchVersion v) { return !g.weights_only(v); });
    if (releases.empty()) continue;
    std::string what = " outside the weights_only allowlist of torch.load";
    if (!options.torch.empty()) what += " in torch " + releases;
    if (g.kind == GlobalKind::kWeightsOnly) what += " (allowed from torch " + g.allowed_since.str() + " on)";
    else what += " (" + std::string(global_kind_description(g.kind)) + ")";
    found.push_back({"global '" + g.dotted() + "'", "is" + what, CheckViolation::OneOfMany{"globals", g.dotted(), "are" + what}});
  }
  for (const std::string& opcode : verdict.opcodes) {
    found.push_back({"opcode " + opcode,
                     "is outside the pickle opcodes torch.load reads with weights_only (ckptfix convert re-writes "
                     "the pickle at protocol 2)"});
  }
}

// torch.load(mmap=True) (torch >= 2.1) maps each storage's record where it
// lies in the file, so a deflated one is read as its compressed bytes:
// other values than a load without mmap (which inflates it, as ckptfix
// does) gives, with no error. torch.save never deflates a record; every
// ckptfix rewrite stores them.
void check_storage_records(const Checkpoint& ck, std::vector<CheckViolation>& found) {
  const CheckpointImpl& impl = impl_of(ck);
  if (!impl.zip) return;
  const std::string data = ck.archive_root() + "/data/";
  for (const ZipEntry& e : impl.zip->entries()) {
    if (e.method == 0 || e.name.size() <= data.size() || e.name.compare(0, data.size(), data) != 0) continue;
    const std::string why =
        "torch.load(mmap=True) reads a deflated record's compressed bytes as its tensor's data, other values than "
        "torch.load without mmap gives (torch.save never deflates a record; a rewrite by ckptfix stores it)";
    found.push_back({"record '" + e.name + "'", "is deflated: " + why,
                     CheckViolation::OneOfMany{"storage records", e.name, "are deflated: " + why}});
  }
}

void check_devices(const CheckOptions& options, const Checkpoint& ck, std::vector<CheckViolation>& found) {
  const std::vector<std::string> names = tensor_names(ck);
  std::vector<std::string> first_key(ck.storages().size());
  for (size_t i = 0; i < ck.tensors().size(); ++i) {
    if (ck.tensors()[i].storage < 0) continue;  // a meta tensor: no storage, no device to check
    std::string& k = first_key[static_cast<size_t>(ck.tensors()[i].storage)];
    if (k.empty()) k = names[i];
  }
  for (size_t i = 0; i < ck.storages().size(); ++i) {
    const StorageInfo& s = ck.storages()[i];
    if (s.location == options.device) continue;
    const bool keyed = !first_key[i].empty();
    const std::string what = "saved on '" + s.location + "', not '" + options.device + "'";
    found.push_back({keyed ? "key '" + first_key[i] + "'" : "storage '" + s.key + "'", what,
                     CheckViolation::OneOfMany{keyed ? "keys" : "storages", keyed ? first_key[i] : s.key, what}});
  }
}

// Every tensor that holds NaN or an infinity, once, named by its first key.
void check_finite(const CheckOptions& options, const Checkpoint& ck, std::vector<CheckViolation>& found) {
  StatsOptions stats_options;
  stats_options.progress = options.progress;
  const StatsReport stats = tensor_stats(ck, stats_options);
  const std::vector<std::string> names = tensor_names(ck);
  for (size_t i = 0; i < stats.tensors.size(); ++i) {
    const TensorStats& t = stats.tensors[i];
    if (!t.computed || t.all_finite()) continue;
    std::string what = "holds";
    const auto part = [&what](uint64_t n, const char* name) {
      if (n == 0) return;
      what += (what == "holds" ? " " : ", ") + std::to_string(n) + " " + name;
    };
    part(t.nan, "NaN");
    part(t.posinf, "+inf");
    part(t.neginf, "-inf");
    found.push_back({"key '" + names[i] + "'", what + " (of " + std::to_string(t.elements) + " elements)"});
  }
}

void check_dicts(const CheckOptions& options, const Checkpoint& ck, std::vector<CheckViolation>& found) {
  const CheckpointImpl& impl = impl_of(ck);
  const std::vector<TargetDict> dicts = select_dicts(impl, options.keys);
  for (const std::string& prefix : options.no_prefixes) {
    for (const TargetDict& d : dicts) {
      for (const auto& [k, v] : d.dict->entries()) {
        if (!k->is_str() || k->text.compare(0, prefix.size(), prefix) != 0) continue;
        Path path = d.path;
        path.push_back(k->text);
        const std::string name = path_to_string(path);
        found.push_back({"key '" + name + "'", "starts with '" + prefix + "'",
                         CheckViolation::OneOfMany{"keys", name, "start with '" + prefix + "'"}});
      }
    }
  }
  if (options.dtypes.empty()) return;
  std::vector<std::string> allowed_names;
  for (DType d : options.dtypes) allowed_names.emplace_back(dtype_name(d));
  for (const TargetTensor& t : select_tensors(impl, dicts, ExtraStates::kSkip)) {
    const DType dtype = impl.tensors[t.tensor].dtype;
    if (!is_floating(dtype) || std::find(options.dtypes.begin(), options.dtypes.end(), dtype) != options.dtypes.end()) {
      continue;
    }
    const std::string rule = std::string(dtype_name(dtype)) + ", allowed: " + comma_list(allowed_names);
    found.push_back({"key '" + t.where + "'", "is " + rule, CheckViolation::OneOfMany{"keys", t.where, "are " + rule}});
  }
}

// What each release's load_state_dict(strict=True) says (1.13 and 2.x
// differ on unexpected keys): a line all of them say once, another with the
// releases that say it.
void check_load(const CheckOptions& options, const Checkpoint& ck, const std::vector<TorchVersion>& torch,
                CheckReport& report) {
  const std::string key = options.keys.empty() ? std::string() : options.keys.front();
  // The releases' load_state_dict differ only between 1.x and 2.x: one verdict for each asked.
  std::map<bool, LoadVerdict> by_major;
  for (const TorchVersion& v : torch) {
    const bool torch2 = v >= TorchVersion{2, 0};
    if (!by_major.count(torch2)) by_major.emplace(torch2, load_verdict(ck, *options.like, key, v));
  }
  report.load = by_major.at(torch.back() >= TorchVersion{2, 0});  // the newest's
  const Path& judged = report.load->state_dict;
  const std::string where = (judged.empty() ? std::string() : "key '" + path_to_string(judged) + "', ") +
                            "load_state_dict of '" + options.like->name + "'";
  // Every line any release says, first said first, with the releases that say it.
  std::vector<std::string> lines;
  std::unordered_map<std::string, std::vector<std::string>> saying;
  for (const TorchVersion& v : torch) {
    for (const std::string& line : by_major.at(v >= TorchVersion{2, 0}).lines) {
      auto [it, added] = saying.try_emplace(line);
      if (added) lines.push_back(line);
      if (it->second.empty() || it->second.back() != v.str()) it->second.push_back(v.str());
    }
  }
  for (const std::string& line : lines) {
    const std::vector<std::string>& releases = saying.at(line);
    report.violations.push_back(
        {releases.size() == torch.size() ? where : where + " (torch " + comma_list(releases) + ")", line});
  }
}

}  // namespace

void validate_check_options(const CheckOptions& options) {
  for (const std::string& g : options.allow_globals) {
    if (g.empty()) throw Error(ErrorKind::kInvalidArgument, "`allow_globals` needs a non-empty pattern");
  }
  for (const std::string& p : options.no_prefixes) {
    if (p.empty()) throw Error(ErrorKind::kInvalidArgument, "`no_prefixes` needs a non-empty prefix");
  }
  if (!options.device.empty()) validate_device(options.device);
  for (const TorchVersion& v : options.torch) modeled_torch_version(v);
  if (options.like && options.keys.size() > 1) {
    throw Error(ErrorKind::kInvalidArgument, "`like` judges one state dict: give at most one of `keys`");
  }
}

CheckReport check_file(const std::filesystem::path& file, const CheckOptions& options) {
  CheckReport report;
  // Opening is the first check: a sound structure, no known gadget. A file
  // that does not open throws, as Checkpoint::open does.
  Checkpoint ck = Checkpoint::open(file, options.open);
  if (options.crc) {
    // Then every record's CRC-32 (verify_file checks them before anything
    // else): the file opened, so what it finds is a damaged record, the
    // file's one violation.
    VerifyOptions verify;
    verify.gpu = GpuMode::kOff;
    verify.open = options.open;
    verify.progress = options.progress;
    try {
      verify_file(file, verify);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCorrupt || e.location().empty()) throw;
      report.violations.push_back({e.location(), e.message()});
      return report;
    }
  }
  return error_boundary(ck.file_name(), [&] {
    std::vector<TorchVersion> torch = options.torch;
    if (torch.empty()) torch.push_back(default_torch_version());
    std::sort(torch.begin(), torch.end());
    torch.erase(std::unique(torch.begin(), torch.end()), torch.end());
    for (const TorchVersion& v : torch) report.weights_only_by_torch.push_back(weights_only_verdict(ck, v));
    report.weights_only = report.weights_only_by_torch.front();
    check_weights_only(options, ck, torch, *report.weights_only, report.violations);
    // What torch.load's weights_only never looks inside: the pickles a
    // model unpickles from its extra states (nested.h).
    for (NestedViolation& n : nested_violations(nested_pickles(ck), options.allow_globals)) {
      report.violations.push_back({"key '" + n.key + "'", std::move(n.what) +
                                                              ": the model's load_state_dict would run it (its "
                                                              "set_extra_state unpickles it after torch.load)"});
    }
    check_storage_records(ck, report.violations);
    if (!options.device.empty()) check_devices(options, ck, report.violations);
    check_dicts(options, ck, report.violations);
    if (options.finite) check_finite(options, ck, report.violations);
    if (options.like) check_load(options, ck, torch, report);
    return report;
  });
}

std::string_view global_kind_description(GlobalKind kind) {
  switch (kind) {
    case GlobalKind::kWeightsOnly: return "weights_only allowlist";
    case GlobalKind::kData: return "known data";
    case GlobalKind::kUnknown: return "unknown: may run its own code when loaded";
    case GlobalKind::kGadget: return "gadget";
    case GlobalKind::kFunction: return "a function held as a value, never called";
  }
  return "unknown";
}

}  // namespace ckptfix

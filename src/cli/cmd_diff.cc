// ckptfix diff A B [--atol X] [--rtol Y] [--key PATH]... [--strip-prefix[=P]]...
// [--auto-prefix] [--all] [--json] [-q]: which tensors differ between two
// checkpoints, and by how much. Keys and prefixes are chosen as `fix`
// chooses them; a difference many keys share is one line with their count
// and a few of them (--all: a line each).
#include <cstdio>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "ckptfix/diff.h"
#include "cli/last_resort.h"
#include "cli/commands.h"
#include "cli/json_report.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

struct DiffArgs {
  std::string a, b;
  DiffOptions options;
  bool json = false;
  bool quiet = false;
  bool all = false;
  std::vector<std::string> limits;  // --limit NAME=VALUE
};

// Examples a grouped line names before "and N more".
constexpr size_t kExamples = 3;

// Lines "LABEL: key" for each key, or, unless `all`, one line for several:
// "LABEL: N keys: 'a', 'b', 'c' and M more (--all lists them)".
std::string grouped(const std::string& label, const std::vector<std::string>& keys, bool all) {
  if (keys.empty()) return "";
  std::string out;
  if (all || keys.size() == 1) {
    for (const std::string& k : keys) out += label + ": " + printable(k) + "\n";
    return out;
  }
  out = label + ": " + std::to_string(keys.size()) + " keys: ";
  for (size_t i = 0; i < std::min(kExamples, keys.size()); ++i) out += (i ? ", '" : "'") + printable(keys[i]) + "'";
  if (keys.size() > kExamples) out += " and " + std::to_string(keys.size() - kExamples) + " more (--all lists them)";
  return out + "\n";
}

std::string dims(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

int run(DiffArgs& args) {
  try {
    if (args.options.atol < 0 || args.options.rtol < 0) throw Error(ErrorKind::kInvalidArgument, "--atol and --rtol must not be negative");
    // max_compared_elements is the comparison's own limit; the others are ReadLimits.
    std::vector<std::string> read_limits;
    for (const std::string& l : args.limits) {
      const auto [name, value] = parse_limit(l);
      if (name == "max_compared_elements") {
        args.options.max_compared_elements = value;
      } else {
        read_limits.push_back(l);
      }
    }
    const OpenOptions open = open_options(read_limits);
    set_current_input(args.a);
    set_last_resort_exit_code(kExitUsage);
    const Checkpoint a = Checkpoint::open(args.a, open);
    const Checkpoint b = Checkpoint::open(args.b, open);
    const DiffReport r = diff_checkpoints(a, b, args.options);
    size_t value_diffs = 0, dtype_diffs = 0, shape_diffs = 0, device_diffs = 0;
    nlohmann::json tensors = nlohmann::json::array();
    // Each differing key's difference in words; keys with the same words are
    // said together (a retag or a cast changes every key alike).
    std::vector<std::string> order;
    std::map<std::string, std::vector<std::string>> keys_by_difference;
    for (const TensorDiff& d : r.tensors) {
      value_diffs += d.mismatched > 0;
      dtype_diffs += d.dtype_differs();
      shape_diffs += d.shape_differs();
      device_diffs += d.device_differs();
      tensors.push_back({{"key", d.key},
                         {"equal", d.equal},
                         {"dtype", {d.dtype_a, d.dtype_b}},
                         {"shape", {d.shape_a, d.shape_b}},
                         {"device", {d.device_a, d.device_b}},
                         {"numel", d.numel},
                         {"mismatched", d.mismatched},
                         {"max_abs_diff", d.max_abs_diff},
                         {"max_rel_diff", d.max_rel_diff}});
      if (d.equal) continue;
      std::vector<std::string> parts;
      if (d.dtype_differs()) parts.push_back("dtype " + d.dtype_a + " vs " + d.dtype_b);
      if (d.device_differs()) parts.push_back("device " + printable(d.device_a) + " vs " + printable(d.device_b));
      if (d.shape_differs()) {
        parts.push_back("shape " + dims(d.shape_a) + " vs " + dims(d.shape_b));
      } else if (d.mismatched > 0) {
        parts.push_back(std::to_string(d.mismatched) + " of " + std::to_string(d.numel) +
                        " elements differ, max abs diff " + num(d.max_abs_diff) + ", max rel diff " +
                        num(d.max_rel_diff));
      } else if (d.max_abs_diff > 0) {
        parts.push_back("values within tolerance");
      }
      std::string words;
      for (const std::string& p : parts) words += (words.empty() ? "" : "; ") + p;
      auto [it, added] = keys_by_difference.try_emplace(words);
      if (added) order.push_back(words);
      it->second.push_back(d.key);
    }
    if (args.json) {
      print_out(json_text({{"ckptfix", version()},     {"command", "diff"},
                           {"a", args.a},               {"b", args.b},
                           {"equal", r.equal},          {"atol", args.options.atol},
                           {"rtol", args.options.rtol}, {"only_in_a", r.only_in_a},
                           {"only_in_b", r.only_in_b},  {"tensors", tensors}}) +
                "\n");
    } else if (!args.quiet) {
      std::string text;
      for (const std::string& words : order) {
        const std::vector<std::string>& keys = keys_by_difference[words];
        if (args.all || keys.size() == 1) {
          for (const std::string& k : keys) text += printable(k) + ": " + words + "\n";
          continue;
        }
        text += std::to_string(keys.size()) + " keys: " + words + ": ";
        for (size_t i = 0; i < std::min(kExamples, keys.size()); ++i) text += (i ? ", '" : "'") + printable(keys[i]) + "'";
        if (keys.size() > kExamples) text += " and " + std::to_string(keys.size() - kExamples) + " more (--all lists them)";
        text += "\n";
      }
      text += grouped("only in A", r.only_in_a, args.all) + grouped("only in B", r.only_in_b, args.all);
      if (r.equal) {
        text += "equal: " + std::to_string(r.tensors.size()) + " tensors compared " +
                (args.options.atol == 0 && args.options.rtol == 0 ? "exactly" : "within tolerance") + "\n";
      } else {
        text += "differ: " + std::to_string(r.only_in_a.size()) + " keys only in A, " +
                std::to_string(r.only_in_b.size()) + " only in B, " + std::to_string(shape_diffs) + " shape, " +
                std::to_string(dtype_diffs) + " dtype, " + std::to_string(device_diffs) + " device and " +
                std::to_string(value_diffs) + " value differences\n";
      }
      print_out(text);
    }
    return r.equal ? kExitOk : kExitFailed;
  } catch (const Error& e) {
    print_error(e);
    return kExitUsage;  // like GNU diff: 0 same, 1 different, 2 trouble
  } catch (const std::exception& e) {  // the library lets only Error out; never abort if it did not
    print_error(Error(ErrorKind::kInternal, std::string("internal error: ") + e.what()));
    return kExitUsage;
  }
}

}  // namespace

CommandRun register_diff(CLI::App& app) {
  auto args = std::make_shared<DiffArgs>();
  CLI::App* cmd = app.add_subcommand("diff", "Compare the tensors of two checkpoints (exit 0 equal, 1 different)");
  cmd->add_option("a", args->a, "First checkpoint")->required();
  cmd->add_option("b", args->b, "Second checkpoint")->required();
  cmd->add_option("--atol", args->options.atol, "Absolute tolerance (default 0: exact)");
  cmd->add_option("--rtol", args->options.rtol, "Relative tolerance (default 0: exact)");
  cmd->add_flag("--strip-prefix{module.}", args->options.strip_prefixes,
                "Match keys ignoring this prefix (repeatable; --strip-prefix alone means 'module.', as in fix)");
  cmd->add_flag("--auto-prefix", args->options.strip_wrappers,
                "Match keys ignoring any chain of known wrapper prefixes (module., _orig_mod., ...)");
  cmd->add_option("--key", args->options.keys,
                  "Compare only the dicts at this '/'-separated path in both files (repeatable), as in fix")
      ->allow_extra_args(false);
  cmd->add_flag("--all", args->all, "A line for every key (by default, keys that differ alike are one line)");
  cmd->add_flag("-q,--quiet", args->quiet, "Print nothing but errors: the exit code says equal (0) or not (1)");
  cmd->add_flag("--ignore-dtype", args->options.ignore_dtype, "Do not count dtype differences (values still compared)");
  cmd->add_flag("--ignore-device", args->options.ignore_device, "Do not count saved-device differences");
  cmd->add_flag("--json", args->json, "Print one JSON document (schema in docs/cli.md)");
  add_limit_option(cmd, args->limits, "max_compared_elements");
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli

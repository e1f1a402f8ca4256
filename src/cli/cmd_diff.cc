// ckptfix diff A B [--atol X] [--rtol Y] [--strip-prefix[=P]] [--json]:
// which tensors differ between two checkpoints, and by how much.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "ckptfix/diff.h"
#include "cli/commands.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

struct DiffArgs {
  std::string a, b;
  DiffOptions options;
  std::vector<std::string> strip;  // --strip-prefix[=P]
  bool json = false;
  std::vector<std::string> limits;  // --limit NAME=VALUE
};

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
  for (const std::string& s : args.strip) {
    if (s.empty()) {
      args.options.strip_wrappers = true;
    } else {
      args.options.strip_prefix = s;
    }
  }
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
    for (const TensorDiff& d : r.tensors) {
      value_diffs += d.mismatched > 0;
      dtype_diffs += d.dtype_differs();
      shape_diffs += d.shape_differs();
      device_diffs += d.device_differs();
      const bool same = d.equal;
      tensors.push_back({{"key", d.key},
                         {"equal", same},
                         {"dtype", {d.dtype_a, d.dtype_b}},
                         {"shape", {d.shape_a, d.shape_b}},
                         {"device", {d.device_a, d.device_b}},
                         {"numel", d.numel},
                         {"mismatched", d.mismatched},
                         {"max_abs_diff", d.max_abs_diff},
                         {"max_rel_diff", d.max_rel_diff}});
      if (args.json || same) continue;
      std::cout << printable(d.key) << ":";  // keys and devices come from the files
      if (d.dtype_differs()) std::cout << " dtype " << d.dtype_a << " vs " << d.dtype_b << ";";
      if (d.device_differs()) std::cout << " device " << printable(d.device_a) << " vs " << printable(d.device_b) << ";";
      if (d.shape_differs()) {
        std::cout << " shape " << dims(d.shape_a) << " vs " << dims(d.shape_b);
      } else {
        std::cout << " " << d.mismatched << " of " << d.numel << " elements differ, max abs diff "
                  << num(d.max_abs_diff) << ", max rel diff " << num(d.max_rel_diff);
      }
      std::cout << "\n";
    }
    if (args.json) {
      std::cout << json_text({{"ckptfix", version()},     {"command", "diff"},
                              {"a", args.a},               {"b", args.b},
                              {"equal", r.equal},          {"atol", args.options.atol},
                              {"rtol", args.options.rtol}, {"only_in_a", r.only_in_a},
                              {"only_in_b", r.only_in_b},  {"tensors", tensors}})
                << std::endl;
    } else {
      for (const std::string& k : r.only_in_a) std::cout << "only in A: " << printable(k) << "\n";
      for (const std::string& k : r.only_in_b) std::cout << "only in B: " << printable(k) << "\n";
      if (r.equal) {
        std::cout << "equal: " << r.tensors.size() << " tensors compared "
                  << (args.options.atol == 0 && args.options.rtol == 0 ? "exactly" : "within tolerance") << std::endl;
      } else {
        std::cout << "differ: " << r.only_in_a.size() << " keys only in A, " << r.only_in_b.size() << " only in B, "
                  << shape_diffs << " shape, " << dtype_diffs << " dtype, " << device_diffs << " device and "
                  << value_diffs << " value differences" << std::endl;
      }
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
  cmd->add_flag("--strip-prefix{}", args->strip,
                "Match keys ignoring this prefix (alone: any chain of known wrapper prefixes)");
  cmd->add_flag("--ignore-dtype", args->options.ignore_dtype, "Do not count dtype differences (values still compared)");
  cmd->add_flag("--ignore-device", args->options.ignore_device, "Do not count saved-device differences");
  cmd->add_flag("--json", args->json, "Print one JSON document (schema in docs/cli.md)");
  add_limit_option(cmd, args->limits, "max_compared_elements");
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli

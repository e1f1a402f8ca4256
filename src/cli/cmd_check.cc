// ckptfix check FILE... [--allow-global PATTERN]... [--device D]
// [--no-prefix P]... [--dtype T,...] [--no-crc] [--key PATH]... [--all]: a
// gate for CI and pre-commit hooks. Writes nothing; lists the violations as
// "FILE: WHERE: WHAT" and exits 1 when there is any; a rule broken by many
// keys is one line with their count and a few of them (--all: a line each).
// By default a file passes when every record's CRC-32 is right, it opens,
// and the default torch.load (weights_only=True, torch >= 2.6) would load
// it: every global on torch's allowlist (or trusted with --allow-global),
// every pickle opcode in torch's weights_only subset; of the newest torch
// ckptfix models, or of each release --torch names.
#include <algorithm>
#include <map>
#include <optional>

#include "ckptfix/check.h"
#include "ckptfix/error.h"
#include "cli/batch.h"
#include "cli/commands.h"
#include "cli/like_options.h"
#include "cli/report.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {
namespace {

struct CheckArgs {
  BatchArgs batch;
  std::string device;
  std::vector<std::string> no_prefix;
  std::vector<std::string> dtypes;
  std::vector<std::string> allow_globals;
  bool safe = false;  // the default since globals are judged by an allowlist; kept for old scripts
  bool crc = false;   // the default since issue 50; kept for old scripts
  bool no_crc = false;
  bool all = false;   // a line for every violation, not one per rule broken by many keys
  bool finite = false;
  std::vector<std::string> keys;
  std::vector<std::string> torch;  // --torch 2.6,2.11,2.14
  LikeArgs like;
};

// The command that makes a file load into the model, from what the fit needs.
std::string fit_hint(const CheckArgs& args, const std::string& file, const LoadVerdict& load) {
  std::string command = "ckptfix fix --like " + printable(args.like.like) +
                        (args.like.like_key.empty() ? "" : " --like-key " + printable(args.like.like_key)) + " " + file +
                        (args.keys.empty() ? "" : " --key " + printable(args.keys.front())) + " -o OUT";
  if (!load.fix) {
    return "ckptfix: hint: its keys cannot all be placed by fix --like's rules alone; '" + command +
           "' says why, and --rename REGEX=REPL or --drop GLOB tells it what no rule knows\n";
  }
  if (load.fix_keeps == 0 && load.tensors > 0) {
    // Advice that writes an empty state dict is no advice (issue 67); the fix refuses it too.
    return "ckptfix: hint: none of its " + std::to_string(load.tensors) +
           " tensors has a key the model has, by fix --like's rules or by name and shape; where they are the "
           "model's under other names, '" + command + " --rename REGEX=REPL' maps them\n";
  }
  for (const auto& [pattern, replacement] : load.fix->renames) {
    // Double quotes: the hint itself is in single quotes, and a shell keeps `\.` in double quotes.
    command += " --rename \"" + printable(pattern) + "=" + printable(replacement) + "\"";
  }
  if (load.fix->allow_missing) command += " --allow-missing";
  if (load.fix->drop_unexpected) command += " --drop-unexpected";
  if (load.fix->drop_mismatched) command += " --drop-mismatched";
  std::string what = "makes it load";
  if (!load.fix->renames.empty()) what += " (the renames pair keys by their parameters' names and shapes)";
  if (load.fix->allow_missing || load.fix->drop_unexpected || load.fix->drop_mismatched) {
    what += ", keeping " + std::to_string(load.fix_keeps) + " of the file's " + std::to_string(load.tensors) +
            " tensors (what the options leave out or lack is listed as it is written)";
  }
  return "ckptfix: hint: '" + command + "' " + what + "\n";
}

// Examples a grouped line names before "and N more".
constexpr size_t kExamples = 3;

// The text lines of `violations` for FILE (already printable): one per
// violation, except that the violations of a rule broken by several keys
// (CheckViolation::one_of_many) are one line, with their count and the first
// few keys, unless `all`.
std::string violation_lines(const std::string& file, const std::vector<CheckViolation>& violations, bool all) {
  struct Group {
    const CheckViolation* first;
    std::vector<std::string> names;
  };
  std::vector<Group> groups;
  std::map<std::pair<std::string, std::string>, size_t> index;  // (nouns, what_of_many) -> group
  for (const CheckViolation& v : violations) {
    if (all || !v.one_of_many) {
      groups.push_back({&v, {}});
      continue;
    }
    const auto [it, added] = index.emplace(std::make_pair(v.one_of_many->nouns, v.one_of_many->what_of_many),
                                           groups.size());
    if (added) groups.push_back({&v, {}});
    groups[it->second].names.push_back(v.one_of_many->name);
  }
  std::string out;
  for (const Group& g : groups) {
    const CheckViolation& v = *g.first;
    if (g.names.size() < 2) {
      out += file + ": " + printable(v.where) + ": " + printable(v.what) + "\n";
      continue;
    }
    out += file + ": " + std::to_string(g.names.size()) + " " + v.one_of_many->nouns + " " +
           printable(v.one_of_many->what_of_many) + ": ";
    for (size_t i = 0; i < std::min(kExamples, g.names.size()); ++i) {
      out += (i ? ", '" : "'") + printable(g.names[i]) + "'";
    }
    if (g.names.size() > kExamples) out += " and " + std::to_string(g.names.size() - kExamples) + " more (--all lists them)";
    out += "\n";
  }
  return out;
}

int run(const CheckArgs& args) {
  CheckOptions options;
  std::vector<Input> inputs;
  std::optional<JsonReport> report;
  try {
    options.open = open_options(args.batch.limits);
    options.allow_globals = args.allow_globals;
    options.device = args.device;
    options.no_prefixes = args.no_prefix;
    for (const std::string& d : args.dtypes) options.dtypes.push_back(parse_user_dtype(d, "--dtype"));
    options.keys = args.keys;
    options.crc = !args.no_crc;
    options.finite = args.finite;
    for (const std::string& v : args.torch) options.torch.push_back(parse_user_torch(v));
    options.like = read_like(args.like, options.open);
    validate_check_options(options);
    inputs = expand_inputs(args.batch);
    report.emplace("check", args.batch.json, args.batch.report);
  } catch (const Error& e) {
    print_error(e);
    return exit_code_for(e);
  }
  const BatchResult result = run_batch(inputs, args.batch, [&](const Input& input, Progress& progress) {
    Outcome o;
    std::vector<CheckViolation> violations;
    std::string like_hint;
    try {
      CheckOptions file_options = options;
      file_options.progress = [&progress, started = false](std::string_view phase, uint64_t done,
                                                           uint64_t total) mutable {
        if (!started) progress.phase(std::string(phase), total), started = true;
        progress.update(done);
      };
      CheckReport report = check_file(input.path, file_options);
      if (report.weights_only) o.doc["weights_only"] = weights_only_json(*report.weights_only);
      if (!args.torch.empty()) {
        o.doc["weights_only_by_torch"] = nlohmann::json::array();
        for (const WeightsOnlyVerdict& v : report.weights_only_by_torch) {
          nlohmann::json j = weights_only_json(v);
          j["torch"] = v.torch.str();
          o.doc["weights_only_by_torch"].push_back(std::move(j));
        }
      }
      if (report.load) {
        o.doc["load_state_dict"] = {{"loads", report.load->loads()}, {"lines", report.load->lines},
                                    {"fixable", report.load->fix.has_value()}};
        if (report.load->fix && !report.load->loads()) {  // the advised fix, and what it keeps
          nlohmann::json renames = nlohmann::json::array();
          for (const auto& [pattern, replacement] : report.load->fix->renames) renames.push_back({pattern, replacement});
          o.doc["load_state_dict"]["fix"] = {{"renames", renames},
                                             {"allow_missing", report.load->fix->allow_missing},
                                             {"drop_unexpected", report.load->fix->drop_unexpected},
                                             {"drop_mismatched", report.load->fix->drop_mismatched},
                                             {"keeps", report.load->fix_keeps},
                                             {"tensors", report.load->tensors}};
        }
        if (!report.load->loads() && !args.batch.quiet) like_hint = fit_hint(args, printable(input.path), *report.load);
      }
      violations = std::move(report.violations);
    } catch (const Error& thrown) {
      if (thrown.kind() == ErrorKind::kInterrupted || thrown.kind() == ErrorKind::kInternal) {
        return failed_outcome(input, thrown);  // ckptfix's own failure, not the file's: on stderr
      }
      // A file that does not open (damaged, dangerous, not a checkpoint,
      // not readable) fails the gate: a violation like any other, on
      // stdout, with what salvage could recover where it is damaged.
      const Error e = with_salvage_hint(thrown, input.path, options.open);
      o = failed_outcome(input, e);
      o.err.clear();
      // Where: in the input, or in another file of it (a shard, a rank's file), named.
      std::string where = e.location().empty() ? "structure" : e.location();
      if (!e.file().empty() && e.file() != printable(input.path)) {
        where = "'" + e.file() + "'" + (e.location().empty() ? "" : " " + e.location());
      }
      violations.push_back({where, e.message()});
    } catch (const std::exception& e) {
      return failed_outcome(input, e);
    }
    const bool opened = o.status != OutcomeStatus::kFailed;
    o.doc["path"] = input.path;
    o.doc["violations"] = nlohmann::json::array();
    for (const CheckViolation& v : violations) o.doc["violations"].push_back({{"where", v.where}, {"what", v.what}});
    // Keys come from the file: printed, they are made printable, so that no
    // key can end a line and forge another ("model.pt: ok").
    const std::string shown_path = printable(input.path);
    o.out = violations.empty() ? shown_path + ": ok\n" : violation_lines(shown_path, violations, args.all);
    o.status = violations.empty() ? OutcomeStatus::kOk : OutcomeStatus::kFailed;
    o.exit_code = violations.empty() ? kExitOk : std::max(o.exit_code, kExitFailed);
    o.doc["status"] = status_name(o.status);
    // The hint, where torch.load's refusal is among the violations (not all trusted with --allow-global).
    const bool refused_by_torch = std::any_of(violations.begin(), violations.end(), [](const CheckViolation& v) {
      return v.where.rfind("global '", 0) == 0 || v.where.rfind("opcode ", 0) == 0;
    });
    if (refused_by_torch && opened && !args.batch.quiet) {
      o.err += "ckptfix: hint: 'ckptfix weights-only " + shown_path + " -o OUT' rewrites what torch.load refuses\n";
    }
    o.err += like_hint;
    return o;
  }, *report, [](Outcome& o) {
    // An input the run could not use (a dangling link, an unreadable
    // directory, a tree with no checkpoint) fails the gate as a file that
    // does not open does: a violation on stdout.
    if (o.status != OutcomeStatus::kFailed || o.doc.contains("violations")) return;
    const std::string error = o.doc.value("error", "");
    const std::string path = printable(o.doc.value("path", ""));
    const std::string what = error.rfind("'" + path + "': ", 0) == 0 ? error.substr(path.size() + 4) : error;
    o.doc["violations"] = nlohmann::json::array({{{"where", "structure"}, {"what", what}}});
    o.out = path + ": structure: " + what + "\n";
    o.err.clear();
  });
  return finish_batch("check", args.batch, result, *report);
}

}  // namespace

CommandRun register_check(CLI::App& app) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "Gate for CI: exit 1 listing every violation (default: the file opens and the default torch.load, "
      "weights_only=True, would load it)");
  add_batch_options(cmd, args->batch);
  cmd->add_option("--device", args->device, "Every storage must be saved on this device (e.g. cpu)");
  cmd->add_option("--no-prefix", args->no_prefix, "No state-dict key may start with this prefix (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--dtype", args->dtypes, "Every floating tensor of the state dicts must have one of these types")
      ->allow_extra_args(false)
      ->delimiter(',');
  cmd->add_option("--allow-global", args->allow_globals,
                  "Trust globals matching this glob (repeatable), e.g. 'mypkg.*' or argparse.Namespace; known "
                  "gadgets are refused regardless")
      ->allow_extra_args(false);
  cmd->add_flag("--safe", args->safe, "Accepted for old scripts: the weights_only allowlist is now the default");
  cmd->add_flag("--no-crc", args->no_crc,
                "Do not read the whole file to check every record's CRC-32 (checked by default)");
  cmd->add_flag("--crc", args->crc, "Accepted for old scripts: every record's CRC-32 is checked by default");
  cmd->add_flag("--all", args->all,
                "A line for every violation (by default, a rule broken by several keys is one line naming a few)");
  cmd->add_flag("--finite", args->finite, "No tensor may hold NaN or an infinity (every tensor is read)");
  cmd->add_option("--key", args->keys, "Check the dicts at these paths instead of the state dicts (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--torch", args->torch,
                  torch_option_help("whose default torch.load must load the file; several, comma-separated "
                                    "(--torch 2.6,2.11,2.14), name the releases that would refuse"))
      ->allow_extra_args(false)
      ->delimiter(',');
  add_like_options(cmd, args->like, false);
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli

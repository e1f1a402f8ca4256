// ckptfix check FILE... [--allow-global PATTERN]... [--device D]
// [--no-prefix P]... [--dtype T,...] [--crc] [--key PATH]...: a gate for CI
// and pre-commit hooks. Writes nothing; lists every violation as
// "FILE: WHERE: WHAT" and exits 1 when there is any. By default a file
// passes when it opens and the default torch.load (weights_only=True, torch
// >= 2.6) would load it: every global on torch's allowlist (or trusted with
// --allow-global), every pickle opcode in torch's weights_only subset.
#include <algorithm>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/passes.h"
#include "ckptfix/verify.h"
#include "ckptfix/weights_only.h"
#include "cli/batch.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "cli/rewrite.h"
#include "passes/targets.h"

namespace ckptfix::cli {
namespace {

struct CheckArgs {
  BatchArgs batch;
  std::string device;
  std::vector<std::string> no_prefix;
  std::vector<std::string> dtypes;
  std::vector<std::string> allow_globals;
  bool safe = false;  // the default since globals are judged by an allowlist; kept for old scripts
  bool crc = false;
  std::vector<std::string> keys;
};

struct Violation {
  std::string where;
  std::string what;
};

std::string comma_list(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s;
}

bool trusted(const std::vector<std::string>& patterns, const std::string& global) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) { return glob_match(p, global); });
}

// What the default torch.load refuses, less the globals the project trusts.
void check_weights_only(const CheckArgs& args, const Checkpoint& ck, const WeightsOnlyVerdict& verdict,
                        std::vector<Violation>& found) {
  for (const GlobalRef& g : ck.globals()) {
    if (g.weights_only() || trusted(args.allow_globals, g.dotted())) continue;
    found.push_back({"global '" + g.dotted() + "'", "is outside the weights_only allowlist of torch.load (" +
                                                       global_kind_text(g.kind) + ")"});
  }
  for (const std::string& opcode : verdict.opcodes) {
    found.push_back({"opcode " + opcode,
                     "is outside the pickle opcodes torch.load reads with weights_only (ckptfix convert re-writes "
                     "the pickle at protocol 2)"});
  }
}

std::vector<Violation> check_file(const CheckArgs& args, const std::vector<DType>& allowed, const OpenOptions& open,
                                  const Input& input, Progress& progress, nlohmann::json& doc) {
  std::vector<Violation> found;
  if (args.crc) {
    // verify_file checks every record's CRC-32 before anything else.
    VerifyOptions options;
    options.gpu = GpuMode::kOff;
    options.open = open;
    options.progress = [&progress, started = false](std::string_view phase, uint64_t done, uint64_t total) mutable {
      if (!started) progress.phase(std::string(phase), total), started = true;
      progress.update(done);
    };
    try {
      verify_file(input.path, options);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::kCorrupt || e.location().empty()) throw;
      found.push_back({e.location(), e.message()});
      return found;
    }
  }
  // Opening is the first check: a sound structure, no known gadget.
  Checkpoint ck = Checkpoint::open(input.path, open);
  const std::vector<std::string> names = tensor_names(ck);
  const WeightsOnlyVerdict verdict = weights_only_verdict(ck);
  doc["weights_only"] = weights_only_json(verdict);
  check_weights_only(args, ck, verdict, found);

  if (!args.device.empty()) {
    std::vector<std::string> first_key(ck.storages().size());
    for (size_t i = 0; i < ck.tensors().size(); ++i) {
      std::string& k = first_key[static_cast<size_t>(ck.tensors()[i].storage)];
      if (k.empty()) k = names[i];
    }
    for (size_t i = 0; i < ck.storages().size(); ++i) {
      const Storage& s = ck.storages()[i];
      if (s.location == args.device) continue;
      found.push_back({first_key[i].empty() ? "storage '" + s.key + "'" : "key '" + first_key[i] + "'",
                       "saved on '" + s.location + "', not '" + args.device + "'"});
    }
  }
  const std::vector<TargetDict> dicts = select_dicts(ck, args.keys);
  for (const std::string& prefix : args.no_prefix) {
    for (const TargetDict& d : dicts) {
      for (const auto& [k, v] : d.dict->entries()) {
        if (!k->is_str() || k->text.compare(0, prefix.size(), prefix) != 0) continue;
        Path path = d.path;
        path.push_back(k->text);
        found.push_back({"key '" + path_to_string(path) + "'", "starts with '" + prefix + "'"});
      }
    }
  }
  if (!allowed.empty()) {
    std::vector<std::string> allowed_names;
    for (DType d : allowed) allowed_names.emplace_back(dtype_name(d));
    for (const TargetTensor& t : select_tensors(ck, dicts)) {
      const Tensor& tensor = ck.tensors()[t.tensor];
      if (!is_floating(tensor.dtype) || std::find(allowed.begin(), allowed.end(), tensor.dtype) != allowed.end()) continue;
      found.push_back({"key '" + t.where + "'", "is " + std::string(dtype_name(tensor.dtype)) + ", allowed: " +
                                                    comma_list(allowed_names)});
    }
  }
  return found;
}

int run(const CheckArgs& args) {
  std::vector<DType> allowed;
  std::vector<Input> inputs;
  OpenOptions open;
  try {
    open = open_options(args.batch.limits);
    for (const std::string& g : args.allow_globals) {
      if (g.empty()) throw Error(ErrorKind::kInvalidArgument, "--allow-global needs a non-empty pattern");
    }
    for (const std::string& d : args.dtypes) allowed.push_back(parse_user_dtype(d, "--dtype"));
    if (!args.device.empty()) validate_device(args.device);
    for (const std::string& p : args.no_prefix) {
      if (p.empty()) throw Error(ErrorKind::kInvalidArgument, "--no-prefix needs a non-empty prefix");
    }
    inputs = expand_inputs(args.batch);
  } catch (const Error& e) {
    print_error(e);
    return exit_code_for(e);
  }
  const BatchResult result = run_batch(inputs, args.batch, [&](const Input& input, Progress& progress) {
    Outcome o;
    std::vector<Violation> violations;
    try {
      violations = check_file(args, allowed, open, input, progress, o.doc);
    } catch (const std::exception& e) {
      // A file that does not open (damaged, dangerous, not a checkpoint) fails
      // the gate, with the usual error line too.
      o = failed_outcome(input, e);
      const auto* err = dynamic_cast<const Error*>(&e);
      violations.push_back({err == nullptr || err->location().empty() ? "structure" : err->location(),
                            err != nullptr ? err->message() : o.doc["error"].get<std::string>()});
    }
    o.doc["path"] = input.path;
    o.doc["violations"] = nlohmann::json::array();
    // Keys come from the file: printed, they are made printable, so that no
    // key can end a line and forge another ("model.pt: ok").
    const std::string shown_path = printable(input.path);
    for (const Violation& v : violations) {
      o.doc["violations"].push_back({{"where", v.where}, {"what", v.what}});
      o.out += shown_path + ": " + printable(v.where) + ": " + printable(v.what) + "\n";
    }
    o.status = violations.empty() ? "ok" : "failed";
    o.exit_code = violations.empty() ? kExitOk : kExitFailed;
    o.doc["status"] = o.status;
    if (violations.empty()) o.out = shown_path + ": ok\n";
    return o;
  });
  return finish_batch("check", args.batch, result);
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
  cmd->add_flag("--crc", args->crc, "Every record's CRC-32 must be right");
  cmd->add_option("--key", args->keys, "Check the dicts at these paths instead of the state dicts (repeatable)")
      ->allow_extra_args(false);
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli

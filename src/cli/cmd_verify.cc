// ckptfix verify FILE... [--gpu auto|require|off] [--json]: checks that
// checkpoints stand on their own (structure, CRC-32 of every record, a safe
// parse, every view inside its storage, every storage of the right size).
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "ckptfix/verify.h"
#include "cli/batch.h"
#include "cli/commands.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

struct VerifyArgs {
  BatchArgs batch;
  std::string gpu = "auto";
};

int run(const VerifyArgs& args) {
  VerifyOptions options;
  std::vector<Input> inputs;
  std::optional<JsonReport> report;
  try {
    options.gpu = parse_gpu_mode(args.gpu);
    options.open = open_options(args.batch.limits);
    require_gpu_if_asked(options.gpu);
    inputs = expand_inputs(args.batch);
    report.emplace("verify", args.batch.json, args.batch.report);
  } catch (const Error& e) {
    print_error(e);
    return exit_code_for(e);
  }
  const BatchResult result = run_batch(inputs, args.batch, [&](const Input& input, Progress& progress) {
    try {
      VerifyOptions file_options = options;
      file_options.progress = [&progress, started = false](std::string_view phase, uint64_t done,
                                                           uint64_t total) mutable {
        if (!started) progress.phase(std::string(phase), total), started = true;
        progress.update(done);
      };
      const VerifyReport report = verify_file(input.path, file_options);
      Outcome o;
      o.doc = {{"path", input.path},
               {"status", "ok"},
               {"verification", verification_json(report)}};
      o.out = printable(input.path) + ": ok: " + report.summary() + "\n";
      return o;
    } catch (const Error& e) {
      return failed_outcome(input, with_salvage_hint(e, input.path, options.open));
    }
  }, *report);
  return finish_batch("verify", args.batch, result, *report);
}

}  // namespace

CommandRun register_verify(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check checkpoints: structure, CRC-32 of every record, safe pickle, views and storage sizes");
  add_batch_options(cmd, args->batch);
  cmd->add_option("--gpu", args->gpu, "Also copy every storage through GPU memory: auto (default), require or off");
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli

// ckptfix verify FILE... [--gpu auto|require|off] [--json]: checks that
// checkpoints stand on their own (structure, CRC-32 of every record, a safe
// parse, every view inside its storage, every storage of the right size).
#include <iostream>

#include <nlohmann/json.hpp>

#include "ckptfix/verify.h"
#include "cli/commands.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

struct VerifyArgs {
  std::vector<std::string> files;
  std::string gpu = "auto";
  bool json = false;
  bool quiet = false;
};

int run(const VerifyArgs& args) {
  VerifyOptions options;
  try {
    options.gpu = parse_gpu_mode(args.gpu);
    require_gpu_if_asked(options.gpu);
  } catch (const Error& e) {
    print_error(e);
    return exit_code_for(e);
  }
  int exit_code = kExitOk;
  nlohmann::json inputs = nlohmann::json::array();
  size_t ok = 0, failed = 0;
  for (const std::string& file : args.files) {
    nlohmann::json doc = {{"path", file}};
    try {
      const VerifyReport report = verify_file(file, options);
      doc["status"] = "ok";
      doc["verification"] = {{"records", report.records},
                             {"records_crc_checked", report.records_crc_checked},
                             {"storages", report.storages},
                             {"tensors", report.tensors},
                             {"bytes", report.bytes},
                             {"seconds", report.seconds},
                             {"gpu", gpu_json(report.gpu)}};
      ++ok;
      if (!args.json && !args.quiet) std::cout << file << ": ok: " << report.summary() << std::endl;
    } catch (const Error& e) {
      print_error(e);
      exit_code = std::max(exit_code, exit_code_for(e));
      doc["status"] = "failed";
      doc["error"] = e.what();
      doc["error_kind"] = to_string(e.kind());
      ++failed;
    }
    inputs.push_back(std::move(doc));
  }
  if (args.json) {
    std::cout << nlohmann::json{{"ckptfix", version()},
                                {"command", "verify"},
                                {"inputs", inputs},
                                {"summary", {{"ok", ok}, {"unchanged", 0}, {"failed", failed}}}}
                     .dump(2)
              << std::endl;
  }
  return exit_code;
}

}  // namespace

CommandRun register_verify(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check checkpoints: structure, CRC-32 of every record, safe pickle, views and storage sizes");
  cmd->add_option("files", args->files, "Checkpoint files")->required();
  cmd->add_option("--gpu", args->gpu, "Also copy every storage through GPU memory: auto (default), require or off");
  cmd->add_flag("--json", args->json, "Print one JSON document (schema in docs/cli.md)");
  cmd->add_flag("-q,--quiet", args->quiet, "Print nothing but errors");
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli

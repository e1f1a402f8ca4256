// ckptfix convert IN -o OUT: re-writes a checkpoint as a torch zip file
// (upgrading legacy files), changing nothing else.
#include <iostream>

#include "ckptfix/checkpoint.h"
#include "ckptfix/save.h"
#include "cli/commands.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

struct ConvertArgs {
  std::string input;
  std::string output;
  bool force = false;
};

int run(const ConvertArgs& args) {
  try {
    Checkpoint ck = Checkpoint::open(args.input);
    SaveOptions options;
    options.overwrite = args.force;
    const SaveResult result = save(ck, args.output, options);
    std::cerr << "ckptfix: " << args.input << " -> " << args.output << ": " << result.storages.size() << " storages, "
              << human_bytes(result.bytes) << " written" << std::endl;
    return kExitOk;
  } catch (const Error& e) {
    print_error(e);
    return exit_code_for(e);
  }
}

}  // namespace

CommandRun register_convert(CLI::App& app) {
  auto args = std::make_shared<ConvertArgs>();
  CLI::App* cmd = app.add_subcommand("convert", "Re-write a checkpoint as a torch zip file (legacy files are upgraded)");
  cmd->add_option("input", args->input, "Input checkpoint")->required();
  cmd->add_option("-o,--output", args->output, "Output file")->required();
  cmd->add_flag("-f,--force", args->force, "Overwrite an existing output");
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli

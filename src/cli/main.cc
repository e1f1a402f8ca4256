// ckptfix: the command line. It parses flags into option structs, calls the
// library, prints, and maps errors to exit codes; nothing more.
#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/report.h"

int main(int argc, char** argv) {
  using namespace ckptfix::cli;
  install_last_resort_handlers();
  raise_open_file_limit();
  CLI::App app{"ckptfix: convert and repair PyTorch checkpoints without Python, never running pickle code"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return version_text(); });
  std::vector<std::pair<std::string, CommandRun>> commands;
  commands.emplace_back("inspect", register_inspect(app));
  commands.emplace_back("convert", register_convert(app));
  commands.emplace_back("strip-prefix", register_strip_prefix(app));
  commands.emplace_back("add-prefix", register_add_prefix(app));
  commands.emplace_back("remap", register_remap(app));
  commands.emplace_back("cast", register_cast(app));
  commands.emplace_back("fix", register_fix(app));
  commands.emplace_back("verify", register_verify(app));
  commands.emplace_back("diff", register_diff(app));
  commands.emplace_back("check", register_check(app));
  commands.emplace_back("weights-only", register_weights_only(app));
  commands.emplace_back("salvage", register_salvage(app));
  commands.emplace_back("layout", register_layout(app));

  // CLI11 would call an unknown command an unexpected argument; say it plainly.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string name = argv[1];
    const bool known = std::any_of(commands.begin(), commands.end(), [&](const auto& c) { return c.first == name; });
    if (!known) {
      std::cerr << "ckptfix: error: unknown command '" << name << "'\nrun 'ckptfix --help' for the commands" << std::endl;
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "ckptfix: error: " << e.what() << "\n";
    std::cerr << "run 'ckptfix --help' for usage" << std::endl;
    return kExitUsage;
  }
  // The commands report each input's failure themselves; this is the last
  // line, so that nothing ever ends in std::terminate (exit 134).
  try {
    for (auto& [name, run] : commands) {
      if (app.get_subcommand(name)->parsed()) return run();
    }
  } catch (const std::exception& e) {
    print_error(e);
    return kExitFailed;
  }
  return kExitUsage;
}

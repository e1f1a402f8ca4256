// Each subcommand registers itself on the CLI11 app; the returned callback
// runs it after parsing and returns the exit code.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace ckptfix::cli {

using CommandRun = std::function<int()>;

CommandRun register_inspect(CLI::App& app);
CommandRun register_convert(CLI::App& app);

}  // namespace ckptfix::cli

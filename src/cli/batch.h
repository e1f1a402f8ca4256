// Many inputs: expanding directories, running files in parallel, printing
// each file's text in input order, and the JSON envelope every command
// shares (docs/cli.md, "JSON reports").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/progress.h"

namespace ckptfix::cli {

/// Options every command that takes many inputs has.
struct BatchArgs {
  std::vector<std::string> inputs;
  bool recursive = false;
  std::vector<std::string> globs;  ///< file name globs for --recursive (default *.pt *.pth *.bin *.ckpt)
  int jobs = 0;                    ///< 0: the thread budget (thread_budget)
  /// --threads (the rewriting commands): threads at once in all, shared by
  /// the --jobs files; 0: one per core.
  unsigned threads = 0;
  bool json = false;
  bool quiet = false;
  std::vector<std::string> limits;  ///< --limit NAME=VALUE
  /// --tag: DeepSpeed checkpoint directories are read at this tag (a
  /// directory in each) instead of the one their `latest` names.
  std::string tag;
};

/// Adds INPUTS..., --recursive, --glob, --jobs, --json, --quiet, --limit, --tag.
void add_batch_options(CLI::App* cmd, BatchArgs& args);

/// One input file.
struct Input {
  std::string path;      ///< to open
  std::string relative;  ///< its path below the directory it was found in (or its file name)
  std::string error;     ///< set when the argument cannot be used (a directory without --recursive)
};

/// Expands directories (with --recursive) into their matching files, sorted;
/// with --tag, each input is its tag directory. Throws Error(kInvalidArgument)
/// for a --tag that is no plain name or comes with --recursive.
std::vector<Input> expand_inputs(const BatchArgs& args);

/// What one input produced.
enum class OutcomeStatus { kOk, kUnchanged, kFailed };

/// "ok", "unchanged", "failed": the JSON reports' names.
std::string_view status_name(OutcomeStatus status);

struct Outcome {
  OutcomeStatus status = OutcomeStatus::kOk;
  int exit_code = 0;
  nlohmann::json doc;         ///< the input's object in the JSON report
  std::string out;            ///< text for stdout (not printed with --json)
  std::string err;            ///< text for stderr (status lines, warnings, errors)
};

/// Does one input; must not throw (failures are Outcomes).
using Work = std::function<Outcome(const Input& input, Progress& progress)>;

struct BatchResult {
  std::vector<Outcome> outcomes;  ///< in input order
  size_t ok = 0, unchanged = 0, failed = 0;
  double seconds = 0;
  int exit_code = 0;
};

/// Threads the whole run may use: --threads, else the cores.
size_t thread_budget(const BatchArgs& args);
/// Files processed at once: --jobs, else the thread budget; at most `inputs`.
size_t batch_jobs(const BatchArgs& args, size_t inputs);
/// Threads each of those files may be written with (SaveOptions::threads):
/// with --threads, the budget shared among the jobs, at least one each;
/// without, the cores shared, at least two each (a writer and its
/// read-back), and for one file 0 (the library's choice: every core, up to
/// its limit).
unsigned threads_per_job(const BatchArgs& args, size_t inputs);

/// Runs `work` on every input with batch_jobs() workers, printing each outcome's
/// text in input order as soon as the ones before it are done.
BatchResult run_batch(const std::vector<Input>& inputs, const BatchArgs& args, const Work& work);

/// Prints the JSON report (with `extra` top-level fields) or, for more than
/// one input, the summary line; returns the exit code.
int finish_batch(const std::string& command, const BatchArgs& args, const BatchResult& result,
                 const nlohmann::json& extra = nlohmann::json::object());

/// The Outcome of an input that failed with `e`.
Outcome failed_outcome(const Input& input, const std::exception& e);

}  // namespace ckptfix::cli

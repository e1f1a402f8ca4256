// Many inputs: running them in parallel, printing each one's text in input
// order, streaming the JSON report every command shares (docs/cli.md,
// "JSON reports"), and stopping early when told to (stop.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/input_walk.h"
#include "cli/json_report.h"
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
  std::string report;  ///< --report FILE: the JSON report, written to FILE
  bool quiet = false;
  std::vector<std::string> limits;  ///< --limit NAME=VALUE
  /// --tag: DeepSpeed checkpoint directories are read at this tag (a
  /// directory in each) instead of the one their `latest` names.
  std::string tag;
  /// A directory the walk leaves out: the rewriting commands' --out-dir.
  std::string exclude;

  /// Whether each input's JSON object is needed: --json or --report.
  bool wants_json() const { return json || !report.empty(); }
};

/// Adds INPUTS..., --recursive, --glob, --jobs, --json, --report, --quiet, --limit, --tag.
void add_batch_options(CLI::App* cmd, BatchArgs& args);

/// The inputs the arguments name (input_walk.h).
std::vector<Input> expand_inputs(const BatchArgs& args);

/// What one input produced.
enum class OutcomeStatus { kOk, kUnchanged, kFailed, kInterrupted };

/// "ok", "unchanged", "failed", "interrupted": the JSON reports' names.
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
  size_t inputs = 0;
  size_t ok = 0, unchanged = 0, failed = 0, interrupted = 0;
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

/// Runs `work` on every input with batch_jobs() workers, printing each
/// outcome's text and adding its object to `report` in input order as soon
/// as the ones before it are done; `each`, when given, sees each outcome
/// first (inspect takes its tensors out). Once the run is stopping
/// (stop.h), no input is started: the rest are reported interrupted.
BatchResult run_batch(const std::vector<Input>& inputs, const BatchArgs& args, const Work& work, JsonReport& report,
                      const std::function<void(Outcome&)>& each = {});

/// Ends the report with its summary, prints the summary line for more than
/// one input, and, for a run that was stopped, the line that says so;
/// returns the exit code.
int finish_batch(const std::string& command, const BatchArgs& args, const BatchResult& result, JsonReport& report);

/// The Outcome of an input that failed with `e` (interrupted, where `e` is).
Outcome failed_outcome(const Input& input, const std::exception& e);

}  // namespace ckptfix::cli

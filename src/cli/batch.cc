#include "cli/last_resort.h"
#include "cli/batch.h"

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <thread>

#include "ckptfix/error.h"
#include "cli/report.h"
#include "cli/stop.h"

namespace ckptfix::cli {

std::string_view status_name(OutcomeStatus status) {
  switch (status) {
    case OutcomeStatus::kOk: return "ok";
    case OutcomeStatus::kUnchanged: return "unchanged";
    case OutcomeStatus::kFailed: return "failed";
    case OutcomeStatus::kInterrupted: return "interrupted";
  }
  return "failed";
}

void add_batch_options(CLI::App* cmd, BatchArgs& args) {
  cmd->add_option("inputs", args.inputs, "Checkpoint files (and directories, with --recursive)")->required();
  cmd->add_flag("-r,--recursive", args.recursive,
                "Process every *.pt, *.pth, *.bin and *.ckpt file under directory inputs (docs/cli.md, \"What -r "
                "takes\")");
  cmd->add_option("--glob", args.globs, "File name glob for --recursive (repeatable; replaces the default set)")
      ->allow_extra_args(false);
  cmd->add_option("-j,--jobs", args.jobs, "Files processed in parallel (default: one per core, or --threads)");
  cmd->add_flag("--json", args.json, "Print one JSON report on stdout (schema in docs/cli.md)");
  cmd->add_option("--report", args.report,
                  "Write the JSON report to FILE (beside it, then renamed into place when complete), whatever "
                  "stdout shows");
  cmd->add_flag("-q,--quiet", args.quiet, "Print nothing but errors");
  add_limit_option(cmd, args.limits);
  cmd->add_option("--tag", args.tag,
                  "DeepSpeed checkpoint directories: read this tag (e.g. global_step500) instead of the one their "
                  "`latest` file names");
}

std::vector<Input> expand_inputs(const BatchArgs& args) {
  if (args.jobs < 0) {
    throw Error(ErrorKind::kInvalidArgument, "--jobs " + std::to_string(args.jobs) + ": give a number of files, 1 or more (0: one per core)");
  }
  return expand_inputs(InputArgs{args.inputs, args.recursive, args.globs, args.tag, args.exclude});
}

Outcome failed_outcome(const Input& input, const std::exception& e) {
  Outcome o;
  o.status = OutcomeStatus::kFailed;
  o.exit_code = kExitFailed;
  // Every failure names the input: an Error that knows no file gets it, and
  // anything else (which the library should never let out) becomes one.
  Error err = [&] {
    if (const auto* known = dynamic_cast<const Error*>(&e)) return *known;
    if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
      return Error(ErrorKind::kLimit, "out of memory (the file needs more than this machine can allocate)");
    }
    return Error(ErrorKind::kInternal, std::string("internal error: ") + e.what() + " (a bug in ckptfix)");
  }();
  err.in_file(input.path);
  if (err.kind() == ErrorKind::kInterrupted) o.status = OutcomeStatus::kInterrupted;
  const std::string message = cli_message(err);
  o.exit_code = exit_code_for(err);
  o.doc["error_kind"] = to_string(err.kind());
  o.doc["path"] = input.path;
  o.doc["status"] = status_name(o.status);
  o.doc["error"] = message;
  o.err = "ckptfix: error: " + message + "\n";
  if (!err.details().empty()) {
    o.doc["error_details"] = detail_lines(err);
    for (const std::string& line : detail_lines(err)) o.err += "ckptfix:   " + line + "\n";
  }
  return o;
}

size_t thread_budget(const BatchArgs& args) {
  return args.threads > 0 ? args.threads : std::max(1u, std::thread::hardware_concurrency());
}

size_t batch_jobs(const BatchArgs& args, size_t inputs) {
  return std::max<size_t>(1, std::min<size_t>(inputs, args.jobs > 0 ? static_cast<size_t>(args.jobs) : thread_budget(args)));
}

unsigned threads_per_job(const BatchArgs& args, size_t inputs) {
  const size_t jobs = batch_jobs(args, inputs);
  const size_t share = thread_budget(args) / jobs;
  if (args.threads > 0) return static_cast<unsigned>(std::max<size_t>(1, share));
  // Without --threads, each file keeps its writer and its read-back apart
  // as before: two files on two cores, one thread each, took 13 % longer
  // (median of 12 rounds, 4 x 256 MiB strip-prefix, -j 2).
  return jobs == 1 ? 0 : static_cast<unsigned>(std::max<size_t>(2, share));
}

namespace {

// An input the run did not start: it was told to stop first.
Outcome not_started(const Input& input) {
  Outcome o;
  o.status = OutcomeStatus::kInterrupted;
  o.exit_code = kExitFailed;
  o.doc = {{"path", input.path},
           {"status", status_name(o.status)},
           {"error_kind", to_string(ErrorKind::kInterrupted)},
           {"error", "'" + printable(input.path) + "': " + not_started_reason()}};
  return o;
}

}  // namespace

BatchResult run_batch(const std::vector<Input>& inputs, const BatchArgs& args, const Work& work, JsonReport& report,
                      const std::function<void(Outcome&)>& each) {
  const auto start = std::chrono::steady_clock::now();
  const size_t jobs = batch_jobs(args, inputs.size());
  ProgressDisplay display(!args.quiet && !args.json && ProgressDisplay::stderr_is_terminal(), jobs);

  BatchResult result;
  result.inputs = inputs.size();
  // Outcomes finished out of order wait here until the ones before them
  // are done; each is dropped once printed, so memory stays with the
  // inputs' paths, whatever their number.
  std::vector<std::unique_ptr<Outcome>> waiting(inputs.size());
  std::mutex mutex;
  size_t next_to_print = 0;
  std::atomic<size_t> next_input{0};

  // Prints finished outcomes in input order (called with `mutex` held).
  auto flush_in_order = [&] {
    while (next_to_print < inputs.size() && waiting[next_to_print]) {
      const std::unique_ptr<Outcome> done = std::move(waiting[next_to_print++]);
      Outcome& o = *done;
      if (each) each(o);
      // Quiet: nothing on success; a failure's text (check's violations) and errors still.
      const bool failed = o.status == OutcomeStatus::kFailed;
      if (!args.json && !o.out.empty() && (!args.quiet || failed)) print_out(o.out);
      // An input the run's stop interrupted (a signal, standard output
      // failing) is said by the run's last line, not one of its own.
      const bool said_at_the_end = o.status == OutcomeStatus::kInterrupted && stopping();
      if (!o.err.empty() && (!args.quiet || failed || o.status == OutcomeStatus::kInterrupted) && !said_at_the_end) {
        display.print(o.err);
      }
      report.add_input(o.doc);
      switch (o.status) {
        case OutcomeStatus::kOk: ++result.ok; break;
        case OutcomeStatus::kUnchanged: ++result.unchanged; break;
        case OutcomeStatus::kFailed: ++result.failed; break;
        case OutcomeStatus::kInterrupted: ++result.interrupted; break;
      }
      result.exit_code = std::max(result.exit_code, o.exit_code);
    }
  };

  auto worker = [&](size_t slot) {
    for (size_t i; (i = next_input++) < inputs.size();) {
      const Input& input = inputs[i];
      auto outcome = std::make_unique<Outcome>();
      if (stopping()) {
        *outcome = not_started(input);
      } else if (!input.error.empty()) {
        *outcome = failed_outcome(input, Error(input.kind, input.error).in_file(input.path));
      } else {
        display.begin(slot, input.path);
        set_current_input(input.path);
        Progress progress(display.enabled() ? &display : nullptr, slot);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          *outcome = work(input, progress);
        } catch (const std::exception& e) {  // work should not throw; never lose an input if it does
          *outcome = failed_outcome(input, e);
        }
        outcome->doc["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        display.end(slot);
        set_current_input("");
        rearm_memory_reserve();
      }
      std::lock_guard<std::mutex> lock(mutex);
      waiting[i] = std::move(outcome);
      flush_in_order();
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < jobs; ++t) threads.emplace_back(worker, t);
  worker(0);
  for (std::thread& t : threads) t.join();

  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

int finish_batch(const std::string& command, const BatchArgs& args, const BatchResult& result, JsonReport& report) {
  nlohmann::json summary = {{"ok", result.ok},
                            {"unchanged", result.unchanged},
                            {"failed", result.failed},
                            {"interrupted", result.interrupted},
                            {"seconds", result.seconds}};
  int code = result.exit_code;
  if (!report.finish(summary)) code = std::max(code, kExitFailed);
  if (stdout_error() == EPIPE) return code;  // a closed pipe ends a run without a word (stop.h)
  if (!args.json && !args.quiet && result.inputs > 1) {
    std::cerr << "ckptfix: " << command << ": " << result.inputs << " files: " << result.ok << " ok, "
              << result.unchanged << " unchanged, " << result.failed << " failed"
              << (result.interrupted > 0 ? ", " + std::to_string(result.interrupted) + " interrupted" : "")
              << std::endl;
  }
  if (stop_signal() != 0) {
    const size_t done = result.ok + result.unchanged + result.failed;
    say_interrupted(std::to_string(done) + " of " + std::to_string(result.inputs) + " input" +
                    (result.inputs == 1 ? "" : "s") + " done, " + std::to_string(result.interrupted) +
                    " not; nothing unfinished was left behind" +
                    (args.wants_json() ? "; the report lists each input's outcome" : ""));
  }
  return code;
}

}  // namespace ckptfix::cli

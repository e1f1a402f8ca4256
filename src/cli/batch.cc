#include "cli/batch.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <thread>

#include "ckptfix/error.h"
#include "ckptfix/passes.h"
#include "cli/report.h"

namespace ckptfix::cli {

std::string_view status_name(OutcomeStatus status) {
  switch (status) {
    case OutcomeStatus::kOk: return "ok";
    case OutcomeStatus::kUnchanged: return "unchanged";
    case OutcomeStatus::kFailed: return "failed";
  }
  return "failed";
}
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kDefaultGlobs = {"*.pt", "*.pth", "*.bin", "*.ckpt"};

bool matches(const std::vector<std::string>& globs, const std::string& name) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return glob_match(g, name); });
}

}  // namespace

void add_batch_options(CLI::App* cmd, BatchArgs& args) {
  cmd->add_option("inputs", args.inputs, "Checkpoint files (and directories, with --recursive)")->required();
  cmd->add_flag("-r,--recursive", args.recursive,
                "Process every *.pt, *.pth, *.bin and *.ckpt file under directory inputs");
  cmd->add_option("--glob", args.globs, "File name glob for --recursive (repeatable; replaces the default set)")
      ->allow_extra_args(false);
  cmd->add_option("-j,--jobs", args.jobs, "Files processed in parallel (default: one per core, or --threads)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", args.json, "Print one JSON report on stdout (schema in docs/cli.md)");
  cmd->add_flag("-q,--quiet", args.quiet, "Print nothing but errors");
  add_limit_option(cmd, args.limits);
  cmd->add_option("--tag", args.tag,
                  "DeepSpeed checkpoint directories: read this tag (e.g. global_step500) instead of the one their "
                  "`latest` file names");
}

std::vector<Input> expand_inputs(const BatchArgs& args) {
  const std::vector<std::string>& globs = args.globs.empty() ? kDefaultGlobs : args.globs;
  std::vector<Input> out;
  if (!args.tag.empty() && (args.tag == "." || args.tag == ".." || args.tag.find('/') != std::string::npos)) {
    throw Error(ErrorKind::kInvalidArgument, "--tag '" + args.tag + "': a tag is the name of a directory in the "
                                             "checkpoint directory (what DeepSpeed's `latest` holds)");
  }
  if (!args.tag.empty() && args.recursive) {
    throw Error(ErrorKind::kInvalidArgument, "--tag names one tag of the checkpoint directories given, not of "
                                             "those --recursive finds");
  }
  for (const std::string& arg : args.inputs) {
    std::error_code ec;
    if (!args.tag.empty()) {
      // The tag directory, named for outputs after its checkpoint directory.
      const fs::path checkpoint = fs::path(arg).lexically_normal();
      std::string relative = checkpoint.filename().string();
      if (relative.empty()) relative = checkpoint.parent_path().filename().string();
      if (!fs::is_directory(arg, ec)) {
        out.push_back({arg, "", "--tag reads a tag of a DeepSpeed checkpoint directory, and this is no directory"});
      } else if (!fs::is_directory(checkpoint / args.tag, ec)) {
        out.push_back({arg, "", "has no tag directory '" + args.tag + "' (--tag)"});
      } else {
        out.push_back({(checkpoint / args.tag).string(), relative, ""});
      }
      continue;
    }
    // A distributed or DeepSpeed checkpoint directory is one checkpoint.
    if (!fs::is_directory(arg, ec) || is_checkpoint_directory(arg)) {
      out.push_back({arg, fs::path(arg).lexically_normal().filename().string(), ""});
      if (out.back().relative.empty()) out.back().relative = fs::path(arg).lexically_normal().parent_path().filename().string();
      continue;
    }
    if (!args.recursive) {
      out.push_back({arg, "", "is a directory; use --recursive to process the checkpoints under it"});
      continue;
    }
    std::vector<Input> found;
    for (fs::recursive_directory_iterator it(arg, ec), end; it != end; it.increment(ec)) {
      if (ec) break;
      if (it->is_directory(ec) && is_checkpoint_directory(it->path())) {
        found.push_back({it->path().string(), fs::relative(it->path(), arg).string(), ""});
        it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file(ec) || !matches(globs, it->path().filename().string())) continue;
      found.push_back({it->path().string(), fs::relative(it->path(), arg).string(), ""});
    }
    if (ec) throw Error(ErrorKind::kIo, "cannot list directory: " + ec.message()).in_file(arg);
    std::sort(found.begin(), found.end(), [](const Input& a, const Input& b) { return a.path < b.path; });
    if (found.empty()) {
      // Nothing to do is not success: a gate over a wrong or empty
      // directory must not pass silently.
      std::string names;
      for (const std::string& g : globs) names += (names.empty() ? "" : ", ") + g;
      out.push_back({arg, "", "no checkpoint found under this directory (files named " + names +
                                  ", or distributed or DeepSpeed checkpoint directories; --glob chooses other names)"});
      continue;
    }
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
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
  const std::string message = cli_message(err);
  o.exit_code = exit_code_for(err);
  o.doc["error_kind"] = to_string(err.kind());
  o.doc["path"] = input.path;
  o.doc["status"] = status_name(OutcomeStatus::kFailed);
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

BatchResult run_batch(const std::vector<Input>& inputs, const BatchArgs& args, const Work& work) {
  const auto start = std::chrono::steady_clock::now();
  const size_t jobs = batch_jobs(args, inputs.size());
  ProgressDisplay display(!args.quiet && !args.json && ProgressDisplay::stderr_is_terminal(), jobs);

  BatchResult result;
  result.outcomes.resize(inputs.size());
  std::vector<bool> done(inputs.size(), false);
  std::mutex mutex;
  size_t next_to_print = 0;
  std::atomic<size_t> next_input{0};

  // Prints finished outcomes in input order (called with `mutex` held).
  auto flush_in_order = [&] {
    while (next_to_print < inputs.size() && done[next_to_print]) {
      const Outcome& o = result.outcomes[next_to_print++];
      // Quiet: nothing on success; a failure's text (check's violations) and errors still.
      const bool print_out = !args.json && !o.out.empty() && (!args.quiet || o.status == OutcomeStatus::kFailed);
      if (print_out) std::cout << o.out << std::flush;
      std::string err = o.err;
      if (args.quiet && o.status != OutcomeStatus::kFailed) err.clear();
      if (!err.empty()) display.print(err);
    }
  };

  auto worker = [&](size_t slot) {
    for (size_t i; (i = next_input++) < inputs.size();) {
      const Input& input = inputs[i];
      Outcome outcome;
      if (!input.error.empty()) {
        outcome = failed_outcome(input, Error(ErrorKind::kNotCheckpoint, input.error).in_file(input.path));
      } else {
        display.begin(slot, input.path);
        set_current_input(input.path);
        Progress progress(display.enabled() ? &display : nullptr, slot);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          outcome = work(input, progress);
        } catch (const std::exception& e) {  // work should not throw; never lose an input if it does
          outcome = failed_outcome(input, e);
        }
        outcome.doc["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        display.end(slot);
      }
      set_current_input("");
      rearm_memory_reserve();
      std::lock_guard<std::mutex> lock(mutex);
      result.outcomes[i] = std::move(outcome);
      done[i] = true;
      flush_in_order();
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < jobs; ++t) threads.emplace_back(worker, t);
  worker(0);
  for (std::thread& t : threads) t.join();

  for (const Outcome& o : result.outcomes) {
    if (o.status == OutcomeStatus::kFailed) {
      ++result.failed;
    } else if (o.status == OutcomeStatus::kUnchanged) {
      ++result.unchanged;
    } else {
      ++result.ok;
    }
    result.exit_code = std::max(result.exit_code, o.exit_code);
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

int finish_batch(const std::string& command, const BatchArgs& args, const BatchResult& result,
                 const nlohmann::json& extra) {
  if (args.json) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const Outcome& o : result.outcomes) inputs.push_back(o.doc);
    nlohmann::json out = {{"ckptfix", version()}, {"schema", 1}, {"command", command}, {"inputs", inputs}};
    for (const auto& [key, value] : extra.items()) out[key] = value;
    out["summary"] = {{"ok", result.ok},
                      {"unchanged", result.unchanged},
                      {"failed", result.failed},
                      {"seconds", result.seconds}};
    std::cout << json_text(std::move(out)) << std::endl;
  }
  if (!args.json && !args.quiet && result.outcomes.size() > 1) {
    std::cerr << "ckptfix: " << command << ": " << result.outcomes.size() << " files: " << result.ok << " ok, "
              << result.unchanged << " unchanged, " << result.failed << " failed" << std::endl;
  }
  return result.exit_code;
}

}  // namespace ckptfix::cli

#include "cli/rewrite.h"

#include <optional>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/nested.h"
#include "ckptfix/outputs.h"
#include "ckptfix/rerun.h"
#include "ckptfix/rewrite.h"
#include "ckptfix/safetensors.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"
#include "cli/disposal.h"
#include "cli/output_directories.h"
#include "cli/report.h"
#include "cli/rewrite_render.h"
#include "cli/rewrite_text.h"
#ifdef CKPTFIX_FAULT_INJECTION
// The test-only build reaches below the public API for its seams.
#include "write/fault_injection.h"
#include "write/save_seams.h"
#endif

namespace ckptfix::cli {
namespace {

Error usage(const std::string& message) { return Error(ErrorKind::kInvalidArgument, message); }

void validate_outputs(const RewriteArgs& args, const OutputPlacement& placement, const std::vector<Input>& inputs) {
  const int ways = !args.output.empty() + !args.out_dir.empty() + args.in_place;
  if (ways == 0) {
    throw usage(args.in_place_offered ? "say where to write: -o OUT, --out-dir DIR or --in-place"
                                      : "say where to write: -o OUT or --out-dir DIR");
  }
  if (ways > 1) {
    throw usage(args.in_place_offered ? "-o, --out-dir and --in-place exclude each other"
                                      : "-o and --out-dir exclude each other");
  }
  if (!args.output.empty() && (inputs.size() != 1 || args.batch.inputs.size() != 1)) {
    throw usage("-o takes one input file; use --out-dir DIR for " + std::to_string(inputs.size()) + " inputs");
  }
  // "out/", ".", "..": a directory, which would be created and then refused as an output.
  const std::filesystem::path named(args.output);
  const bool dcp = args.format == "dcp";  // -o names the directory to write
  if (!dcp && !args.output.empty() && (!named.has_filename() || named.filename() == "." || named.filename() == "..")) {
    throw usage("-o '" + args.output + "' names a directory; -o takes a file name (--out-dir DIR writes into a directory)");
  }
  // A shard set's index is written beside its shards, never as the file
  // named: a zip (or one safetensors file) under that name would be read as
  // an index by transformers and by ckptfix, whatever --format says.
  const std::string file_name = named.filename().string();
  if (!dcp && !args.output.empty() && file_name.ends_with(".index.json") && file_name != ".index.json") {
    throw usage("-o '" + args.output + "' names a shard set's index, which ckptfix writes beside the shards: give "
                "-o DIR/model.safetensors (or DIR/pytorch_model.bin) with --max-shard-size SIZE");
  }
  // An output named like something ckptfix does not write (model.onnx, a
  // shard index) would be a torch file under a misleading name: ask which.
  if (!args.output.empty() && args.format.empty() && !format_of_output_name(named)) {
    throw usage("-o '" + args.output + "': ckptfix writes torch files (.pt, .pth, .bin, .ckpt, .pth.tar) and "
                "safetensors files (.safetensors), not '" + named.extension().string() +
                "'; give --format pt or --format safetensors to write one under this name anyway");
  }
  // Paths as given, made absolute, never resolved: an input reached by
  // another name (a link) is refused when the write gets to it (outputs.h).
  auto absolute = [](const std::filesystem::path& p) { return std::filesystem::absolute(p).lexically_normal().string(); };
  std::map<std::string, std::string> inputs_by_path;
  for (const Input& input : inputs) {
    if (input.error.empty()) inputs_by_path.emplace(absolute(input.path), input.path);
  }
  std::map<std::string, std::string> seen;  // output -> input
  for (const Input& input : inputs) {
    if (!input.error.empty()) continue;
    const std::string out = absolute(output_path(placement, {input.path, input.relative}));
    auto [it, inserted] = seen.emplace(out, input.path);
    if (!inserted) {
      throw usage("inputs '" + it->second + "' and '" + input.path + "' would both be written to '" + out + "'");
    }
    const auto onto = inputs_by_path.find(out);
    if (!args.in_place && onto != inputs_by_path.end()) {
      throw usage("'" + input.path + "' would be written onto the input '" + onto->second +
                  "': a run never writes onto its inputs; --in-place rewrites each input itself");
    }
  }
}

// Everything a run decides once, before any input is read.
struct RewriteRun {
  std::string command;
  const RewriteArgs& args;
  const PassOptions& passes;
  InputReader read;
  OpenOptions open;
  std::shared_ptr<const ValidPassOptions> valid_passes;
  SaveOptions save_options;
  std::vector<std::pair<std::string, std::string>> metadata;
  uint64_t max_shard_size = 0;
  OutputPlacement placement;
  std::string recipe;  // rerun.h: what makes the outputs besides their inputs
  /// --in-place: an input that is the same file as one before it (two
  /// snapshots' links to one blob) -> that one's path: rewritten once.
  std::map<std::string, std::string> same_file_as;
  OutputDirectories directories;
  std::shared_ptr<const SaveSeams> test_seams;  // the test-only build's faults
};

#ifdef CKPTFIX_FAULT_INJECTION
// Only in the test-only build ckptfix_fault_injection (docs/testing.md): the
// fault named by CKPTFIX_TEST_FAULT (write-fails-after:N or corrupt-before-verify).
std::shared_ptr<const SaveSeams> test_fault_seams() {
  const char* fault = std::getenv("CKPTFIX_TEST_FAULT");
  if (fault == nullptr) return nullptr;
  try {
    return std::make_shared<const SaveSeams>(fault_seams(fault));
  } catch (const Error& e) {
    throw usage("CKPTFIX_TEST_FAULT: " + e.message());
  }
}
#endif

// A failure, with what the reader said of the input before it (salvage's report).
Outcome failed_with(const Outcome& so_far, Outcome failed) {
  failed.err = so_far.err + failed.err;
  if (so_far.doc.contains("salvage")) failed.doc["salvage"] = so_far.doc["salvage"];
  return failed;
}

// The job of one input, from the run's options.
RewriteJob job_for(RewriteRun& run, const Input& input, const std::filesystem::path& output, Progress& progress,
                   Outcome& told) {
  const RewriteArgs& args = run.args;
  RewriteJob job;
  job.input = input.path;
  job.output = output;
  job.format = args.format == "dcp"           ? OutputFormat::kDcp
               : args.format == "safetensors" ? OutputFormat::kSafetensors
               : args.format == "pt"          ? OutputFormat::kTorch
                                              : OutputFormat::kByName;
  job.in_place = args.in_place;
  job.force = args.force;
  job.passes = run.valid_passes;
  job.save = run.save_options;
  job.save.sync = args.sync;
  job.save.progress = [&progress, last = std::string()](std::string_view phase, uint64_t done, uint64_t total) mutable {
    if (phase != last) progress.phase(last = std::string(phase), total);
    progress.update(done);
  };
  job.drop_aliases = args.drop_aliases;
  job.metadata = run.metadata;
  job.max_shard_size = run.max_shard_size;
  job.recipe = run.recipe;
  job.open = run.open;
  if (run.read) {
    // The first reading says what reading says; a shard's reading again says nothing.
    job.read = [&run, &told, path = input.path, first = true]() mutable {
      Outcome scratch;
      Outcome& into = first ? told : scratch;
      first = false;
      return run.read(path, run.open, into);
    };
  }
  job.before_write = [&run](const std::filesystem::path& folder) { run.directories.create(folder); };
  job.test_seams = run.test_seams;
  return job;
}

Outcome rewrite_input(RewriteRun& run, const Input& input, Progress& progress) {
  const RewriteArgs& args = run.args;
  if (const auto first = run.same_file_as.find(input.path); first != run.same_file_as.end()) {
    return rewritten_as(input, first->second);
  }
  const std::filesystem::path output = output_path(run.placement, {input.path, input.relative});
  Outcome o;
  o.doc = {{"path", input.path}, {"output", output.string()}};
  try {
    RewriteOutcome out = rewrite(job_for(run, input, output, progress, o));
    if (out.status == RewriteStatus::kDoneBefore) return already_done(input, output);
    render_rewrite(run.command, args.batch.wants_json(), input, output, out, o);
    dispose_of(std::move(out));  // a fit's report: every key moved; a save's: a record per tensor
  } catch (Error& e) {
    e.in_file(input.path);
    return failed_with(o, failed_outcome(input, e));
  }
  return o;
}

// Reads the options into `run`; throws Error(kInvalidArgument) for a bad one.
void prepare(RewriteRun& run, const std::vector<Input>& inputs) {
  const RewriteArgs& args = run.args;
  const PassOptions& passes = run.passes;
  PassOptions for_target = passes;
  if (args.torch) for_target.torch = parse_user_torch(*args.torch);
  run.valid_passes = std::make_shared<const ValidPassOptions>(validate_pass_options(std::move(for_target)));
  SaveOptions& save = run.save_options;
  save.verify = !args.no_verify;
  save.dispose = [](std::shared_ptr<void> done_with) { dispose_of(std::move(done_with)); };
  save.allow_globals = args.allow_globals;
  for (const std::string& p : args.allow_globals) {
    if (p.empty()) throw usage("--allow-global needs a non-empty pattern");
  }
  save.libtorch_pickle = passes.for_libtorch;
  save.threads = threads_per_job(args.batch, inputs.size());
  save.verify_options.gpu = parse_gpu_mode(args.gpu);
  run.metadata = parse_metadata(args.metadata);
  if (args.max_shard_size) run.max_shard_size = parse_size(*args.max_shard_size);
  if (args.format == "safetensors" && passes.for_libtorch) throw usage("--for-libtorch writes a torch file, not safetensors");
  if (args.format == "dcp") {
    if (passes.for_libtorch) throw usage("--for-libtorch writes a torch file, not a distributed checkpoint");
    if (args.in_place) throw usage("--in-place rewrites a file as it is; --format dcp writes a directory: give -o DIR");
    if (args.drop_aliases || !run.metadata.empty() || run.max_shard_size > 0) {
      throw usage(std::string(args.drop_aliases ? "--drop-aliases" : !run.metadata.empty() ? "--metadata" : "--max-shard-size") +
                  " does not apply to a distributed checkpoint (--format dcp)");
    }
  }
  // Never onto an input (outputs.h): each input's file by device and inode,
  // and under --out-dir, nothing outside it or through a link below it.
  std::vector<std::string> paths;
  for (const Input& input : inputs) {
    if (input.error.empty()) paths.push_back(input.path);
  }
  save.policy.fence.inputs = std::make_shared<const std::set<FileId>>(input_file_ids(paths));
  if (args.in_place) {
    // One file under two names would be rewritten twice (a prefix added twice).
    std::map<FileId, std::string> first_of;
    for (const std::string& path : paths) {
      const std::optional<FileId> id = file_id(path);
      if (!id) continue;
      const auto [it, first] = first_of.emplace(*id, path);
      if (!first) run.same_file_as.emplace(path, it->second);
    }
  }
  if (!args.out_dir.empty()) save.policy.fence.within = args.out_dir;
  run.recipe = recipe_id(*run.valid_passes, OutputRecipe{run.read ? run.command : "", args.format, passes.for_libtorch,
                                                         args.drop_aliases, run.metadata, run.max_shard_size});
#ifdef CKPTFIX_FAULT_INJECTION
  run.test_seams = test_fault_seams();
#endif
  if (save.verify) require_gpu_if_asked(save.verify_options.gpu);
}

OutputPlacement placement_of(const RewriteArgs& args) {
  if (args.in_place) return {OutputPlacement::Kind::kInPlace, {}, args.format};
  if (!args.output.empty()) return {OutputPlacement::Kind::kFile, args.output, args.format};
  return {OutputPlacement::Kind::kDirectory, args.out_dir, args.format};
}

}  // namespace

int run_rewrite(const std::string& command, const RewriteArgs& args, const PassOptions& passes,
                const InputReader& read) {
  RewriteRun run{command, args, passes, read};
  std::vector<Input> inputs;
  std::optional<JsonReport> report;
  try {
    run.open = rewrite_open_options(args, passes);
    BatchArgs batch = args.batch;
    batch.exclude = args.out_dir;  // a rerun must not read its own outputs
    inputs = expand_inputs(batch);
    run.placement = placement_of(args);
    validate_outputs(args, run.placement, inputs);
    prepare(run, inputs);
    report.emplace(command, args.batch.json, args.batch.report);
  } catch (const Error& e) {
    print_error(e);
    return exit_code_for(e);
  }
  const BatchResult result = run_batch(inputs, args.batch, [&](const Input& input, Progress& progress) {
    return rewrite_input(run, input, progress);
  }, *report);
  run.directories.remove_empty();
  return finish_batch(command, args.batch, result, *report);
}

}  // namespace ckptfix::cli

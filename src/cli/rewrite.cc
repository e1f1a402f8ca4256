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
#include "ckptfix/safetensors.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"
#include "cli/disposal.h"
#include "cli/output_directories.h"
#include "cli/report.h"
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

// What an output is written as: --format, else its extension, else the input's format.
bool writes_safetensors(const RewriteArgs& args, const std::filesystem::path& output, const Checkpoint& input) {
  if (!args.format.empty()) return args.format == "safetensors";
  const std::optional<std::string> named = format_of_output_name(output);
  if (named && !named->empty()) return *named == "safetensors";
  return input.format() == CheckpointFormat::kSafetensors;  // no extension, or an --out-dir/--in-place input's own
}

// Everything a run decides once, before any input is read.
struct RewriteRun {
  std::string command;
  const RewriteArgs& args;
  const PassOptions& passes;
  InputReader read;
  OpenOptions open;
  std::optional<ValidPassOptions> valid_passes;
  SaveOptions save_options;
  std::vector<std::pair<std::string, std::string>> metadata;
  uint64_t max_shard_size = 0;
  OutputPlacement placement;
  std::string recipe;  // rerun.h: what makes the outputs besides their inputs
  /// --in-place: an input that is the same file as one before it (two
  /// snapshots' links to one blob) -> that one's path: rewritten once.
  std::map<std::string, std::string> same_file_as;
  OutputDirectories directories;
};

// What was written for one input, for its report.
struct Written {
  std::vector<std::string> lines;  // what it is and what changed
  std::string file;                // the file the verification line names (a set: its index)
  uint64_t bytes = 0;
  std::optional<VerifyReport> verification;
  size_t shard_count = 0;          // a torch shard set's shards
  bool kept_existing = false;      // already there with these bytes: left as it was
};

#ifdef CKPTFIX_FAULT_INJECTION
// Only in the test-only build ckptfix_fault_injection (docs/testing.md): the
// fault named by CKPTFIX_TEST_FAULT (write-fails-after:N or corrupt-before-verify).
SaveSeams test_fault_seams() {
  const char* fault = std::getenv("CKPTFIX_TEST_FAULT");
  if (fault == nullptr) return {};
  try {
    return fault_seams(fault);
  } catch (const Error& e) {
    throw usage("CKPTFIX_TEST_FAULT: " + e.message());
  }
}

SaveSeams g_seams;  // set once, before any input is written
#endif

// save(), or in the test-only build save() with the requested fault.
SaveResult save_output(const Checkpoint& checkpoint, const std::filesystem::path& output, const SaveOptions& options) {
#ifdef CKPTFIX_FAULT_INJECTION
  return save_with_seams(checkpoint, output, options, g_seams);
#else
  return save(checkpoint, output, options);
#endif
}

SafetensorsResult save_safetensors_output(const Checkpoint& checkpoint, const std::filesystem::path& output,
                                          const SafetensorsOptions& options) {
#ifdef CKPTFIX_FAULT_INJECTION
  return save_safetensors_with_seams(checkpoint, output, options, g_seams);
#else
  return save_safetensors(checkpoint, output, options);
#endif
}

// A failure, with what the reader said of the input before it (salvage's report).
Outcome failed_with(const Outcome& so_far, Outcome failed) {
  failed.err = so_far.err + failed.err;
  if (so_far.doc.contains("salvage")) failed.doc["salvage"] = so_far.doc["salvage"];
  return failed;
}

// Writes `checkpoint` as `format` says, filling `o.doc` with what the
// writer reports.
Written write_output(RewriteRun& run, Checkpoint& checkpoint, const PassReport& report,
                     const std::function<Checkpoint()>& reopen, CheckpointFormat format, bool torch_shards,
                     const std::filesystem::path& output, const SaveOptions& options, Outcome& o) {
  const RewriteArgs& args = run.args;
  // The JSON of every change is made only for a report; a fit of 100,000
  // keys made it a few percent of the rewrite's time.
  auto changes = [&](const SaveResult* saved) {
    return args.batch.wants_json() ? changes_json(report, saved) : nlohmann::json::object();
  };
  Written w;
  w.file = output.string();
  if (format == CheckpointFormat::kSafetensors) {
    SafetensorsOptions st;
    st.drop_aliases = args.drop_aliases;
    st.metadata = run.metadata;
    st.overwrite = options.overwrite;
    st.allow_globals = options.allow_globals;
    st.policy = options.policy;
    st.sync = options.sync;
    st.verify = options.verify;
    st.verify_options = options.verify_options;
    st.progress = options.progress;
    st.threads = options.threads;
    st.max_shard_size = run.max_shard_size;
    const SafetensorsResult saved = save_safetensors_output(checkpoint, output, st);
    o.doc["changes"] = changes(nullptr);
    o.doc["format"] = "safetensors";
    o.doc["shared"] = saved.shared;
    nlohmann::json dropped = nlohmann::json::array();
    for (const auto& [gone, kept] : saved.dropped) dropped.push_back({{"key", gone}, {"kept", kept}});
    o.doc["dropped_aliases"] = dropped;
    o.doc["files"] = saved.files;
    w.lines.push_back(saved.files.size() > 1 ? "safetensors shard set, " + std::to_string(saved.files.size() - 1) +
                                                   " shards and an index, " + std::to_string(saved.tensors) + " tensors"
                                             : "safetensors, " + std::to_string(saved.tensors) + " tensors");
    for (const std::string& line : describe(report, nullptr)) w.lines.push_back(line);
    for (const auto& group : saved.shared) {
      std::string keys;
      for (const std::string& k : group) keys += (keys.empty() ? "'" : ", '") + k + "'";
      w.lines.push_back(keys + " share their bytes: written once per key");
    }
    for (const auto& [gone, kept] : saved.dropped) w.lines.push_back("dropped alias '" + gone + "' of '" + kept + "'");
    if (!saved.files.empty()) w.file = saved.files.back();
    w.bytes = saved.bytes;
    w.verification = saved.verification;
    w.kept_existing = saved.kept_existing;
  } else if (format == CheckpointFormat::kDcp) {
    const DcpSaveResult saved = save_dcp(checkpoint, output, options);
    o.doc["changes"] = changes(nullptr);
    o.doc["format"] = "dcp";
    o.doc["files"] = saved.files;
    w.lines.push_back("distributed checkpoint, " + std::to_string(saved.tensors) + " tensors and " +
                      std::to_string(saved.values) + " other values in " + saved.files.front());
    for (const std::string& line : describe(report, nullptr)) w.lines.push_back(line);
    w.bytes = saved.bytes;
    w.verification = saved.verification;
  } else if (torch_shards) {
    const TorchShardSetResult saved = save_torch_shard_set(checkpoint, reopen, output, options, run.max_shard_size);
    o.doc["changes"] = changes(nullptr);
    o.doc["files"] = saved.files;
    w.lines.push_back(saved.files.size() > 1 ? "torch shard set, " + std::to_string(saved.files.size() - 1) +
                                                   " shards and an index, " + std::to_string(saved.tensors) + " keys"
                                             : "one torch file (the state dict fits in one shard), " +
                                                   std::to_string(saved.tensors) + " keys");
    for (const std::string& line : describe(report, nullptr)) w.lines.push_back(line);
    if (!saved.files.empty()) w.file = saved.files.back();
    w.bytes = saved.bytes;
    if (!saved.verifications.empty()) w.verification = saved.verifications.back();
    w.shard_count = saved.files.size() > 1 ? saved.files.size() - 1 : 0;
  } else {
    SaveResult saved = save_output(checkpoint, output, options);
    o.doc["changes"] = changes(&saved);
    w.lines = describe(report, &saved);
    w.bytes = saved.bytes;
    w.verification = saved.verification;
    w.kept_existing = saved.kept_existing;
    dispose_of(std::move(saved));  // a record and a storage per tensor
  }
  return w;
}

// The report of an input whose output is there already, made from it as it
// is now by these options (rerun.h): nothing is read or written.
Outcome already_done(const Input& input, const std::filesystem::path& output) {
  Outcome o;
  o.status = OutcomeStatus::kUnchanged;
  o.doc = {{"path", input.path},
           {"output", output.string()},
           {"status", status_name(o.status)},
           {"rerun", "done"},
           {"verification", {{"status", "skipped"}, {"reason", "the output was made before, from this input as it is now, by these options"}}}};
  o.err = "ckptfix: " + printable(input.path) + " -> " + printable(output.string()) +
          ": done before (from this input as it is now, by these options); left as it is\n";
  return o;
}

// The report of an input rewritten in place under another name already.
Outcome rewritten_as(const Input& input, const std::string& first) {
  Outcome o;
  o.status = OutcomeStatus::kUnchanged;
  o.doc = {{"path", input.path},
           {"output", input.path},
           {"status", status_name(o.status)},
           {"same_file_as", first},
           {"verification", {{"status", "skipped"}, {"reason", "the same file as an input before it, rewritten there"}}}};
  o.err = "ckptfix: " + printable(input.path) + ": the same file as '" + printable(first) +
          "', rewritten once, there\n";
  return o;
}

Outcome rewrite_input(RewriteRun& run, const Input& input, Progress& progress) {
  const RewriteArgs& args = run.args;
  if (const auto first = run.same_file_as.find(input.path); first != run.same_file_as.end()) {
    return rewritten_as(input, first->second);
  }
  const std::filesystem::path output = output_path(run.placement, {input.path, input.relative});
  Outcome o;
  o.doc = {{"path", input.path}, {"output", output.string()}};
  SaveOptions options = run.save_options;
  options.policy.made_from = MadeFrom{run.recipe, input.path};
  if (args.in_place) options.policy.fence.replaceable = file_id(input.path);
  // A rerun: an output made before from this input by these options is
  // done; one there that is not known to be is kept only where its bytes
  // are what this run writes. --force rewrites whatever is there.
  OutputFinding found;
  if (!args.force) {
    found = find_output(output, *options.policy.made_from, args.in_place);
    if (found.state == OutputState::kDone) return already_done(input, output);
    options.policy.keep_identical = !args.in_place && found.state != OutputState::kAbsent;
  }
  try {
    // The input as its reader makes it: once here, and again for each shard of a torch shard set.
    auto read_as_given = [&](Outcome& told) {
      return run.read ? run.read(input.path, run.open, told) : ReadInput{Checkpoint::open(input.path, run.open), {}};
    };
    ReadInput read_input = read_as_given(o);
    Checkpoint& checkpoint = read_input.checkpoint;
    // What the input's layout rules out is said before the passes judge its keys.
    if (args.in_place && checkpoint.format() == CheckpointFormat::kShardIndex) {
      throw usage("--in-place cannot rewrite a shard set; write a new one with -o DIR/model.safetensors "
                  "--max-shard-size SIZE");
    }
    if (args.in_place && (checkpoint.format() == CheckpointFormat::kDcp || checkpoint.format() == CheckpointFormat::kZero)) {
      throw usage(std::string("--in-place cannot rewrite a ") +
                  (checkpoint.format() == CheckpointFormat::kDcp ? "distributed" : "DeepSpeed") +
                  " checkpoint directory; write one file with -o FILE.pt (or .safetensors)");
    }
    PassReport report = apply_passes(checkpoint, *run.valid_passes);
    const bool dcp = args.format == "dcp";
    const bool safetensors = !dcp && !run.passes.for_libtorch && writes_safetensors(args, output, checkpoint);
    std::vector<std::string> warnings = report.warnings;
    std::vector<std::string> unknown;
    nlohmann::json trusted = nlohmann::json::array();
    if (safetensors) {
      // A safetensors file holds no pickle, so it calls and keeps no global;
      // but an extra state it carries is still unpickled by its model.
      refuse_nested_calls(checkpoint, nested_violations(nested_pickles(checkpoint), args.allow_globals));
    } else {
      // Refused before anything is said or written: one line.
      const UnknownCalls calls = unknown_calls(checkpoint, args.allow_globals);
      refuse_calls(checkpoint, calls);
      std::vector<std::string> kept;  // called ones are said apart: they are trusted
      for (const GlobalRef& g : calls.unknown) {
        unknown.push_back(g.dotted());
        if (g.use != GlobalUse::kCalled) kept.push_back(g.dotted());
      }
      if (!kept.empty()) warnings.push_back(unknown_globals_warning(kept));
      for (const GlobalRef& g : calls.trusted) {
        warnings.push_back(trusted_call_warning(g));
        trusted.push_back(global_use_json(g));
      }
    }
    for (const std::string& w : warnings) o.err += "ckptfix: warning: '" + printable(input.path) + "': " + printable(w) + "\n";
    o.doc["warnings"] = warnings;
    o.doc["unknown_globals"] = unknown;
    o.doc["trusted_calls"] = trusted;
    // A torch output takes --max-shard-size when it is named as
    // transformers names its shard sets (pytorch_model.bin).
    const bool torch_shards = !safetensors && !dcp && run.max_shard_size > 0 && output.extension() == ".bin";
    if (!safetensors && (args.drop_aliases || !run.metadata.empty() || (run.max_shard_size > 0 && !torch_shards))) {
      throw usage(std::string(args.drop_aliases ? "--drop-aliases" : !run.metadata.empty() ? "--metadata" : "--max-shard-size") +
                  " applies to safetensors outputs" + (args.drop_aliases || !run.metadata.empty() ? "" : " and to .bin shard sets") +
                  ", and '" + output.string() + "' is written as a torch file");
    }
    const CheckpointFormat written_as = safetensors ? CheckpointFormat::kSafetensors
                                        : dcp       ? CheckpointFormat::kDcp
                                                    : CheckpointFormat::kZip;
    // Nothing to change and nothing to convert: leave an in-place input alone.
    const bool needs_write = report.changed() || !read_input.lines.empty() || !args.in_place ||
                             checkpoint.format() != written_as || !run.metadata.empty();
    if (!needs_write) {
      o.status = OutcomeStatus::kUnchanged;
      o.doc["changes"] = args.batch.wants_json() ? changes_json(report, nullptr) : nlohmann::json::object();
      o.doc["verification"] = {{"status", "skipped"}, {"reason", "nothing was written"}};
      o.err += "ckptfix: " + printable(input.path) + ": nothing to change" +
               (report.fit ? "; it fits the model of '" + printable(report.fit->reference) + "' as it is" : "") + "\n";
    } else {
      options.overwrite = args.force || args.in_place;
      // Replacing the input destroys the only other copy: make it durable.
      options.sync = args.sync || args.in_place;
      options.progress = [&progress, last = std::string()](std::string_view phase, uint64_t done,
                                                           uint64_t total) mutable {
        if (phase != last) progress.phase(last = std::string(phase), total);
        progress.update(done);
      };
      if (!output.parent_path().empty()) run.directories.create(output.parent_path());
      // Each shard from the input read again with the same passes (save.h).
      auto reopen = [&] {
        Outcome scratch;  // the first reading already said what reading says
        ReadInput again = read_as_given(scratch);
        apply_passes(again.checkpoint, *run.valid_passes);
        return std::move(again.checkpoint);
      };
      Written w = write_output(run, checkpoint, report, reopen, written_as, torch_shards, output, options, o);
      const size_t first = safetensors || torch_shards || dcp ? 1 : 0;  // after the line saying what it is
      w.lines.insert(w.lines.begin() + first, read_input.lines.begin(), read_input.lines.end());
      const bool converted = checkpoint.format() != written_as;
      if (converted) {
        // After a safetensors output's first line (what it is), before the rest.
        w.lines.insert(w.lines.begin() + first, "converted from " + std::string(format_name(checkpoint.format())));
      }
      o.status = report.changed() || !read_input.lines.empty() || ((safetensors || dcp) && converted) || w.shard_count > 1
                     ? OutcomeStatus::kOk
                     : OutcomeStatus::kUnchanged;
      o.doc["verification"] = verification_json(w.verification);
      o.doc["bytes_written"] = w.bytes;
      std::string line = "ckptfix: " + printable(input.path) + " -> " + printable(output.string()) + ": ";
      if (w.lines.empty()) line += run.command == "convert" ? "re-written, nothing else to change" : "nothing to change; written as is";
      for (size_t i = 0; i < w.lines.size(); ++i) line += (i ? "; " : "") + w.lines[i];
      if (w.kept_existing) {
        // A rerun where the record was lost (rerun.h): the bytes said it.
        o.status = OutcomeStatus::kUnchanged;
        o.doc["rerun"] = "same-bytes";
        line += "; already there with the same bytes, left as it is";
      }
      o.err += printable(line) + " (" + human_bytes(w.bytes) + ")\n";
      o.err += fit_key_lines(report);
      std::string verified = w.verification ? "verified: " + w.verification->summary() : "not verified (--no-verify)";
      if (w.verification && w.shard_count > 1) {
        verified = "verified: each of the " + std::to_string(w.shard_count) + " shards read back; the last: " +
                   w.verification->summary();
      }
      o.err += "ckptfix: " + printable(w.file) + ": " + verified + "\n";
    }
    o.doc["status"] = status_name(o.status);
    dispose_of(std::move(read_input.checkpoint));
    dispose_of(std::move(report));  // a fit's: every key moved
  } catch (Error& e) {
    e.in_file(input.path);  // pass errors know the key but not the file
    // An output already there that this run would not have written so: why it is not taken for done.
    if (e.kind() == ErrorKind::kExists && found.state != OutputState::kAbsent) e.note(found.why);
    return failed_with(o, failed_outcome(input, e));
  } catch (const std::filesystem::filesystem_error& e) {
    return failed_with(o, failed_outcome(input, Error(ErrorKind::kIo, e.code().message()).in_file(e.path1().string())));
  }
  return o;
}

// Reads the options into `run`; throws Error(kInvalidArgument) for a bad one.
void prepare(RewriteRun& run, const std::vector<Input>& inputs) {
  const RewriteArgs& args = run.args;
  const PassOptions& passes = run.passes;
  PassOptions for_target = passes;
  if (args.torch) for_target.torch = parse_user_torch(*args.torch);
  run.valid_passes = validate_pass_options(std::move(for_target));
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
  g_seams = test_fault_seams();
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

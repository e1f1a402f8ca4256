// rewrite(): one rewrite as one library call (include/ckptfix/rewrite.h).
// The policy that makes the readers, passes and writers a tool lives here:
// the rerun decision, what the output is written as, the call policy,
// what the output's format refuses, what counts as unchanged.
#include "ckptfix/rewrite.h"

#include <algorithm>
#include <system_error>

#include "ckptfix/error.h"
#include "ckptfix/nested.h"
#include "ckptfix/outputs.h"
#include "write/save_seams.h"

namespace ckptfix {
namespace {

Error option_error(const std::string& message) { return Error(ErrorKind::kInvalidArgument, message); }

// Each output format and the writer that makes it. A torch output named as
// transformers names its shard sets (pytorch_model.bin) is a shard set
// with max_shard_size; every other is one file (or one directory).
struct Writer {
  CheckpointFormat format;
  bool shard_set;  // torch only: a .bin shard set
  void (*write)(const RewriteJob& job, const Checkpoint& checkpoint, const std::function<Checkpoint()>& reopen,
                const SaveOptions& options, RewriteOutcome& out);
};

void write_torch(const RewriteJob& job, const Checkpoint& checkpoint, const std::function<Checkpoint()>&,
                 const SaveOptions& options, RewriteOutcome& out) {
  SaveResult saved = job.test_seams ? save_with_seams(checkpoint, job.output, options, *job.test_seams)
                                    : save(checkpoint, job.output, options);
  out.bytes = saved.bytes;
  out.verification = saved.verification;
  if (saved.kept_existing) out.status = RewriteStatus::kKeptExisting;
  out.torch = std::move(saved);
}

void write_torch_shards(const RewriteJob& job, const Checkpoint& checkpoint, const std::function<Checkpoint()>& reopen,
                        const SaveOptions& options, RewriteOutcome& out) {
  TorchShardSetResult saved = save_torch_shard_set(checkpoint, reopen, job.output, options, job.max_shard_size);
  if (!saved.files.empty()) out.verified_file = saved.files.back();
  out.bytes = saved.bytes;
  if (!saved.verifications.empty()) out.verification = saved.verifications.back();
  out.shard_count = saved.files.size() > 1 ? saved.files.size() - 1 : 0;
  out.torch_shards = std::move(saved);
}

void write_safetensors(const RewriteJob& job, const Checkpoint& checkpoint, const std::function<Checkpoint()>&,
                       const SaveOptions& options, RewriteOutcome& out) {
  SafetensorsOptions st;
  st.drop_aliases = job.drop_aliases;
  st.metadata = job.metadata;
  st.overwrite = options.overwrite;
  st.allow_globals = options.allow_globals;
  st.policy = options.policy;
  st.sync = options.sync;
  st.verify = options.verify;
  st.verify_options = options.verify_options;
  st.progress = options.progress;
  st.threads = options.threads;
  st.max_shard_size = job.max_shard_size;
  SafetensorsResult saved = job.test_seams ? save_safetensors_with_seams(checkpoint, job.output, st, *job.test_seams)
                                           : save_safetensors(checkpoint, job.output, st);
  if (!saved.files.empty()) out.verified_file = saved.files.back();
  out.bytes = saved.bytes;
  out.verification = saved.verification;
  if (saved.kept_existing) out.status = RewriteStatus::kKeptExisting;
  out.safetensors = std::move(saved);
}

void write_dcp(const RewriteJob& job, const Checkpoint& checkpoint, const std::function<Checkpoint()>&,
               const SaveOptions& options, RewriteOutcome& out) {
  DcpSaveResult saved = save_dcp(checkpoint, job.output, options);
  out.bytes = saved.bytes;
  out.verification = saved.verification;
  out.dcp = std::move(saved);
}

constexpr Writer kWriters[] = {
    {CheckpointFormat::kSafetensors, false, write_safetensors},
    {CheckpointFormat::kDcp, false, write_dcp},
    {CheckpointFormat::kZip, true, write_torch_shards},
    {CheckpointFormat::kZip, false, write_torch},
};

const Writer& writer_for(CheckpointFormat format, bool shard_set) {
  for (const Writer& w : kWriters) {
    if (w.format == format && w.shard_set == shard_set) return w;
  }
  throw Error(ErrorKind::kInternal, "no writer for this output");
}

// What the input's layout rules out, said before the passes judge its keys.
void refuse_in_place_of_a_set(const Checkpoint& checkpoint) {
  if (checkpoint.format() == CheckpointFormat::kShardIndex) {
    throw option_error("`in_place` cannot rewrite a shard set; write a new one to DIR/model.safetensors with "
                       "`max_shard_size`");
  }
  if (checkpoint.format() == CheckpointFormat::kDcp || checkpoint.format() == CheckpointFormat::kZero) {
    throw option_error(std::string("`in_place` cannot rewrite a ") +
                       (checkpoint.format() == CheckpointFormat::kDcp ? "distributed" : "DeepSpeed") +
                       " checkpoint directory; write one file (FILE.pt or .safetensors)");
  }
}

// The call policy: refused before anything is written; what is trusted or
// kept is told.
void judge_calls(const RewriteJob& job, const Checkpoint& checkpoint, CheckpointFormat written_as,
                 RewriteOutcome& out) {
  if (written_as == CheckpointFormat::kSafetensors) {
    // A safetensors file holds no pickle, so it calls and keeps no global;
    // but an extra state it carries is still unpickled by its model.
    refuse_nested_calls(checkpoint, nested_violations(nested_pickles(checkpoint), job.save.allow_globals));
    return;
  }
  UnknownCalls calls = unknown_calls(checkpoint, job.save.allow_globals);
  refuse_calls(checkpoint, calls);
  out.unknown_globals = std::move(calls.unknown);
  out.trusted_calls = std::move(calls.trusted);
}

// Options only some outputs take.
void refuse_options_the_output_lacks(const RewriteJob& job, CheckpointFormat written_as, bool torch_shards) {
  if (written_as == CheckpointFormat::kSafetensors) return;
  if (written_as == CheckpointFormat::kDcp) {
    if (job.drop_aliases || !job.metadata.empty() || job.max_shard_size > 0) {
      throw option_error(std::string(job.drop_aliases ? "`drop_aliases`" : !job.metadata.empty() ? "`metadata`" : "`max_shard_size`") +
                         " does not apply to a distributed checkpoint");
    }
    return;
  }
  if (job.drop_aliases || !job.metadata.empty() || (job.max_shard_size > 0 && !torch_shards)) {
    throw option_error(std::string(job.drop_aliases ? "`drop_aliases`" : !job.metadata.empty() ? "`metadata`" : "`max_shard_size`") +
                       " applies to safetensors outputs" +
                       (job.drop_aliases || !job.metadata.empty() ? "" : " and to .bin shard sets") + ", and '" +
                       job.output.string() + "' is written as a torch file");
  }
}

}  // namespace

CheckpointFormat output_format_of(OutputFormat format, const std::filesystem::path& output, const Checkpoint& input,
                                  bool for_libtorch) {
  switch (format) {
    case OutputFormat::kTorch: return CheckpointFormat::kZip;
    case OutputFormat::kSafetensors: return CheckpointFormat::kSafetensors;
    case OutputFormat::kDcp: return CheckpointFormat::kDcp;
    case OutputFormat::kByName: break;
  }
  if (for_libtorch) return CheckpointFormat::kZip;
  const std::optional<std::string> named = format_of_output_name(output);
  if (named && !named->empty()) return *named == "safetensors" ? CheckpointFormat::kSafetensors : CheckpointFormat::kZip;
  // No extension, or an --out-dir/--in-place input's own name.
  return input.format() == CheckpointFormat::kSafetensors ? CheckpointFormat::kSafetensors : CheckpointFormat::kZip;
}

RewriteOutcome rewrite(const RewriteJob& job) {
  RewriteOutcome out;
  SaveOptions options = job.save;
  options.policy.made_from = MadeFrom{job.recipe, job.input.string()};
  if (job.in_place) options.policy.fence.replaceable = file_id(job.input);
  if (!job.force) {
    out.found = find_output(job.output, *options.policy.made_from, job.in_place);
    if (out.found.state == OutputState::kDone) {
      out.status = RewriteStatus::kDoneBefore;
      return out;
    }
    options.policy.keep_identical = !job.in_place && out.found.state != OutputState::kAbsent;
  }
  try {
    auto read = [&] { return job.read ? job.read() : ReadInput{Checkpoint::open(job.input, job.open), {}}; };
    ReadInput input = read();
    Checkpoint& checkpoint = input.checkpoint;
    out.input_format = checkpoint.format();
    out.notes = std::move(input.notes);
    if (job.in_place) refuse_in_place_of_a_set(checkpoint);
    const ValidPassOptions& passes = *job.passes;
    out.report = apply_passes(checkpoint, passes);
    out.warnings = out.report.warnings;
    out.written_as = output_format_of(job.format, job.output, checkpoint, passes.options().for_libtorch);
    judge_calls(job, checkpoint, out.written_as, out);
    const bool torch_shards = out.written_as == CheckpointFormat::kZip && job.max_shard_size > 0 &&
                              job.output.extension() == ".bin";
    refuse_options_the_output_lacks(job, out.written_as, torch_shards);
    const bool converted = checkpoint.format() != out.written_as;
    // Nothing to change and nothing to convert: an input rewritten in place is left alone.
    if (job.in_place && !out.report.changed() && out.notes.empty() && !converted && job.metadata.empty()) {
      out.status = RewriteStatus::kNothingToDo;
    } else {
      options.overwrite = job.force || job.in_place;
      // Replacing the input destroys the only other copy: make it durable.
      options.sync = options.sync || job.in_place;
      if (job.before_write && !job.output.parent_path().empty()) job.before_write(job.output.parent_path());
      // Each shard from the input read again with the same passes (save.h).
      auto reopen = [&] {
        ReadInput again = read();
        apply_passes(again.checkpoint, passes);
        return std::move(again.checkpoint);
      };
      out.verified_file = job.output.string();
      out.status = RewriteStatus::kWrittenAsIs;
      writer_for(out.written_as, torch_shards).write(job, checkpoint, reopen, options, out);
      if (out.status != RewriteStatus::kKeptExisting &&
          (out.report.changed() || !out.notes.empty() ||
           (out.written_as != CheckpointFormat::kZip && converted) || out.shard_count > 1)) {
        out.status = RewriteStatus::kChanged;
      }
    }
    if (options.dispose) options.dispose(std::make_shared<Checkpoint>(std::move(input.checkpoint)));
  } catch (Error& e) {
    e.in_file(job.input.string());  // pass errors know the key but not the file
    // An output already there that this job would not have written so: why it is not taken for done.
    if (e.kind() == ErrorKind::kExists && out.found.state != OutputState::kAbsent) e.note(out.found.why);
    throw;
  } catch (const std::filesystem::filesystem_error& e) {
    throw Error(ErrorKind::kIo, e.code().message()).in_file(e.path1().string());
  }
  return out;
}

}  // namespace ckptfix

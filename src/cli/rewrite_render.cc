// render_rewrite (cli/rewrite_render.h): a RewriteOutcome as report text and JSON.
#include "cli/rewrite_render.h"

#include <nlohmann/json.hpp>

#include "cli/report.h"
#include "cli/rewrite_text.h"

namespace ckptfix::cli {
// What was written, for the report line: what it is, then what changed.
namespace {

std::vector<std::string> written_lines(const RewriteOutcome& out) {
  std::vector<std::string> lines;
  const bool first_says_what = out.safetensors || out.torch_shards || out.dcp;
  if (out.safetensors) {
    const SafetensorsResult& saved = *out.safetensors;
    lines.push_back(saved.files.size() > 1 ? "safetensors shard set, " + std::to_string(saved.files.size() - 1) +
                                                 " shards and an index, " + std::to_string(saved.tensors) + " tensors"
                                           : "safetensors, " + std::to_string(saved.tensors) + " tensors");
    for (const std::string& line : describe(out.report, nullptr)) lines.push_back(line);
    for (const auto& group : saved.shared) {
      std::string keys;
      for (const std::string& k : group) keys += (keys.empty() ? "'" : ", '") + k + "'";
      lines.push_back(keys + " share their bytes: written once per key");
    }
    for (const auto& [gone, kept] : saved.dropped) lines.push_back("dropped alias '" + gone + "' of '" + kept + "'");
  } else if (out.dcp) {
    lines.push_back("distributed checkpoint, " + std::to_string(out.dcp->tensors) + " tensors and " +
                    std::to_string(out.dcp->values) + " other values in " + out.dcp->files.front());
    for (const std::string& line : describe(out.report, nullptr)) lines.push_back(line);
  } else if (out.torch_shards) {
    const TorchShardSetResult& saved = *out.torch_shards;
    lines.push_back(saved.files.size() > 1 ? "torch shard set, " + std::to_string(saved.files.size() - 1) +
                                                 " shards and an index, " + std::to_string(saved.tensors) + " keys"
                                           : "one torch file (the state dict fits in one shard), " +
                                                 std::to_string(saved.tensors) + " keys");
    for (const std::string& line : describe(out.report, nullptr)) lines.push_back(line);
  } else {
    lines = describe(out.report, out.torch ? &*out.torch : nullptr);
  }
  const size_t first = first_says_what ? 1 : 0;  // after the line saying what it is
  lines.insert(lines.begin() + first, out.notes.begin(), out.notes.end());
  if (out.input_format != out.written_as) {
    lines.insert(lines.begin() + first, "converted from " + std::string(format_name(out.input_format)));
  }
  return lines;
}

// The writer's part of the JSON: its format, files, aliases.
void written_json(const RewriteOutcome& out, nlohmann::json& doc) {
  if (out.safetensors) {
    doc["format"] = "safetensors";
    doc["shared"] = out.safetensors->shared;
    nlohmann::json dropped = nlohmann::json::array();
    for (const auto& [gone, kept] : out.safetensors->dropped) dropped.push_back({{"key", gone}, {"kept", kept}});
    doc["dropped_aliases"] = dropped;
    doc["files"] = out.safetensors->files;
  } else if (out.dcp) {
    doc["format"] = "dcp";
    doc["files"] = out.dcp->files;
  } else if (out.torch_shards) {
    doc["files"] = out.torch_shards->files;
  }
}

}  // namespace

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

// The outcome of one input as its report: a line of text and its JSON object.
void render_rewrite(const std::string& command, bool json, const Input& input, const std::filesystem::path& output,
                    const RewriteOutcome& out, Outcome& o) {
  std::vector<std::string> warnings = out.warnings;
  std::vector<std::string> unknown, kept;  // called ones are said apart: they are trusted
  nlohmann::json trusted = nlohmann::json::array();
  for (const GlobalRef& g : out.unknown_globals) {
    unknown.push_back(g.dotted());
    if (g.use != GlobalUse::kCalled) kept.push_back(g.dotted());
  }
  if (!kept.empty()) warnings.push_back(unknown_globals_warning(kept));
  for (const GlobalRef& g : out.trusted_calls) {
    warnings.push_back(trusted_call_warning(g));
    trusted.push_back(global_use_json(g));
  }
  for (const std::string& w : warnings) o.err += "ckptfix: warning: '" + printable(input.path) + "': " + printable(w) + "\n";
  o.doc["warnings"] = warnings;
  o.doc["unknown_globals"] = unknown;
  o.doc["trusted_calls"] = trusted;
  // The JSON of every change is made only for a report; a fit of 100,000
  // keys made it a few percent of the rewrite's time.
  o.doc["changes"] = json ? changes_json(out.report, out.torch ? &*out.torch : nullptr) : nlohmann::json::object();
  if (out.status == RewriteStatus::kNothingToDo) {
    o.status = OutcomeStatus::kUnchanged;
    o.doc["verification"] = {{"status", "skipped"}, {"reason", "nothing was written"}};
    o.err += "ckptfix: " + printable(input.path) + ": nothing to change" +
             (out.report.fit ? "; it fits the model of '" + printable(out.report.fit->reference) + "' as it is" : "") +
             "\n";
    o.doc["status"] = status_name(o.status);
    return;
  }
  written_json(out, o.doc);
  const std::vector<std::string> lines = written_lines(out);
  o.status = out.status == RewriteStatus::kChanged ? OutcomeStatus::kOk : OutcomeStatus::kUnchanged;
  o.doc["verification"] = verification_json(out.verification);
  o.doc["bytes_written"] = out.bytes;
  std::string line = "ckptfix: " + printable(input.path) + " -> " + printable(output.string()) + ": ";
  if (lines.empty()) line += command == "convert" ? "re-written, nothing else to change" : "nothing to change; written as is";
  for (size_t i = 0; i < lines.size(); ++i) line += (i ? "; " : "") + lines[i];
  if (out.status == RewriteStatus::kKeptExisting) {
    // A rerun where the record was lost (rerun.h): the bytes said it.
    o.doc["rerun"] = "same-bytes";
    line += "; already there with the same bytes, left as it is";
  }
  o.err += printable(line) + " (" + human_bytes(out.bytes) + ")\n";
  o.err += fit_key_lines(out.report);
  std::string verified = out.verification ? "verified: " + out.verification->summary() : "not verified (--no-verify)";
  if (out.verification && out.shard_count > 1) {
    verified = "verified: each of the " + std::to_string(out.shard_count) + " shards read back; the last: " +
               out.verification->summary();
  }
  o.err += "ckptfix: " + printable(out.verified_file) + ": " + verified + "\n";
  o.doc["status"] = status_name(o.status);
}

}  // namespace ckptfix::cli

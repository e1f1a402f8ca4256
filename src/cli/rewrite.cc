#include "cli/rewrite.h"

#include <optional>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ckptfix/checkpoint.h"
#include "ckptfix/error.h"
#include "ckptfix/safetensors.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"
#include "cli/disposal.h"
#include "cli/output_directories.h"
#include "cli/report.h"
#ifdef CKPTFIX_FAULT_INJECTION
// The test-only build reaches below the public API for its seams.
#include "write/fault_injection.h"
#include "write/save_seams.h"
#endif

namespace ckptfix::cli {
namespace {

Error usage(const std::string& message) { return Error(ErrorKind::kInvalidArgument, message); }

std::string dtype_choices() {
  return "fp16|float16|half, bf16|bfloat16, fp32|float32|float, fp64|float64|double, "
         "fp8_e4m3|fp8_e4m3fn|float8_e4m3fn, fp8_e5m2|float8_e5m2";
}

}  // namespace

DType parse_user_dtype(const std::string& text, const std::string& flag) {
  const std::optional<DType> d = parse_dtype(text);
  if (!d || !is_cast_type(*d)) {
    throw usage(flag + " '" + text + "': unknown or unsupported dtype; expected " + dtype_choices());
  }
  return *d;
}

namespace {

std::string lowercase(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// The format an output's name says: "safetensors", "pt" (a torch file:
// .pt, .pth, .bin, .ckpt, and .pth.tar, torch.save's name in the ImageNet
// examples and many since), "" for no extension (the input's format then),
// nullopt for an extension ckptfix does not write.
std::optional<std::string> format_of_name(const std::filesystem::path& output) {
  const std::string ext = lowercase(output.extension().string());
  if (ext.empty()) return "";
  if (ext == ".safetensors") return "safetensors";
  if (ext == ".pt" || ext == ".pth" || ext == ".bin" || ext == ".ckpt") return "pt";
  const std::string inner = lowercase(output.stem().extension().string());
  if (ext == ".tar" && (inner == ".pth" || inner == ".pt")) return "pt";
  return std::nullopt;
}

// What an output made from a directory (or a .metadata) is named after:
// the directory's name.
std::filesystem::path directory_name(const Input& input) {
  std::filesystem::path name = std::filesystem::path(input.relative);
  if (name.filename() == ".metadata") name = name.parent_path();
  if (name.empty() || name == ".") name = std::filesystem::absolute(input.path).lexically_normal().parent_path().filename();
  return name;
}

std::filesystem::path output_for(const RewriteArgs& args, const Input& input) {
  if (args.in_place) return input.path;
  if (!args.output.empty()) return args.output;
  if (args.format == "dcp") {  // a directory named after the input, without its extension
    std::filesystem::path name = directory_name(input);
    const std::optional<std::string> known = format_of_name(name);
    if (known && !known->empty()) name.replace_extension();
    return std::filesystem::path(args.out_dir) / name;
  }
  // A distributed checkpoint (its directory, or its .metadata) becomes one
  // file named after the directory.
  std::error_code ec;
  const std::filesystem::path in(input.path);
  if (std::filesystem::is_directory(in, ec) || in.filename() == ".metadata") {
    return std::filesystem::path(args.out_dir) /
           (directory_name(input).string() + (args.format == "safetensors" ? ".safetensors" : ".pt"));
  }
  return std::filesystem::path(args.out_dir) / input.relative;
}

bool known_output_name(const std::filesystem::path& output) { return format_of_name(output).has_value(); }

void validate_outputs(const RewriteArgs& args, const std::vector<Input>& inputs) {
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
  if (!args.output.empty() && args.format.empty() && !known_output_name(named)) {
    throw usage("-o '" + args.output + "': ckptfix writes torch files (.pt, .pth, .bin, .ckpt, .pth.tar) and "
                "safetensors files (.safetensors), not '" + named.extension().string() +
                "'; give --format pt or --format safetensors to write one under this name anyway");
  }
  std::map<std::string, std::string> seen;  // output -> input
  for (const Input& input : inputs) {
    if (!input.error.empty()) continue;
    const std::string out = std::filesystem::absolute(output_for(args, input)).lexically_normal().string();
    auto [it, inserted] = seen.emplace(out, input.path);
    if (!inserted) {
      throw usage("inputs '" + it->second + "' and '" + input.path + "' would both be written to '" + out + "'");
    }
  }
}

// What an output is written as: --format, else its extension, else the input's format.
bool writes_safetensors(const RewriteArgs& args, const std::filesystem::path& output, const Checkpoint& input) {
  if (!args.format.empty()) return args.format == "safetensors";
  const std::optional<std::string> named = format_of_name(output);
  if (named && !named->empty()) return *named == "safetensors";
  return input.format() == CheckpointFormat::kSafetensors;  // no extension, or an --out-dir/--in-place input's own
}

// "5GB" (decimal, as transformers reads it), "500MiB" (binary), "1000" (bytes).
uint64_t parse_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  std::string unit = text.substr(digits);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, uint64_t> kUnits = {
      {"", 1}, {"B", 1}, {"KB", 1000}, {"MB", 1000'000}, {"GB", 1000'000'000}, {"TB", 1000'000'000'000},
      {"KIB", 1ull << 10}, {"MIB", 1ull << 20}, {"GIB", 1ull << 30}, {"TIB", 1ull << 40}};
  const auto u = kUnits.find(unit);
  uint64_t n = 0, bytes = 0;
  if (digits == 0 || digits > 15 || u == kUnits.end() || (n = std::stoull(text.substr(0, digits))) == 0 ||
      __builtin_mul_overflow(n, u->second, &bytes)) {
    throw usage("--max-shard-size '" + text + "': expected a size such as 5GB, 500MB or 2GiB");
  }
  return bytes;
}

std::vector<std::pair<std::string, std::string>> parse_metadata(const std::vector<std::string>& items) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& m : items) {
    const auto eq = m.find('=');
    if (eq == std::string::npos || eq == 0) throw usage("--metadata '" + m + "': expected KEY=VALUE");
    out.emplace_back(m.substr(0, eq), m.substr(eq + 1));
  }
  return out;
}

// One line per kind of change, for people.
std::vector<std::string> describe(const PassReport& report, const SaveResult* saved) {
  std::vector<std::string> lines;
  for (const ValueChange& c : report.repaired) {
    lines.push_back((c.path.empty() ? std::string("<root>") : path_to_string(c.path)) + ": " + c.was + " -> " +
                    c.became);
  }
  if (report.extracted) lines.push_back("extracted '" + *report.extracted + "'");
  if (report.fit) {
    const FitReport& f = *report.fit;
    std::string line = f.changed ? "fitted" : "fits as it is";
    if (!f.state_dict.empty()) line += " state dict '" + path_to_string(f.state_dict) + "'";
    line += " to the model of '" + f.reference + "'";
    std::vector<std::string> parts;
    if (!f.moved.empty()) parts.push_back(std::to_string(f.moved.size()) + " key" + (f.moved.size() == 1 ? "" : "s") + " renamed");
    if (!f.added.empty()) parts.push_back(std::to_string(f.added.size()) + " made");
    if (!f.dropped.empty()) parts.push_back(std::to_string(f.dropped.size()) + " left out");
    if (!f.missing.empty()) parts.push_back(std::to_string(f.missing.size()) + " missing (allowed)");
    if (f.tensors_cast > 0) parts.push_back(std::to_string(f.tensors_cast) + " tensors cast to the model's types");
    for (size_t i = 0; i < parts.size(); ++i) line += (i ? ", " : ": ") + parts[i];
    if (!f.left_out_of_file.empty()) {
      // The output is the state dict alone: say what of the file it leaves behind.
      line += "; written alone, without the file's ";
      for (size_t i = 0; i < f.left_out_of_file.size() && i < 6; ++i) {
        line += (i ? ", '" : "'") + printable(f.left_out_of_file[i]) + "'";
      }
      if (f.left_out_of_file.size() > 6) line += " and " + std::to_string(f.left_out_of_file.size() - 6) + " more";
    }
    lines.push_back(line);
  }
  if (report.for_libtorch) lines.push_back("state dict written as a plain dict for LibTorch");
  if (!report.renames.empty()) {
    std::ostringstream s;
    s << "renamed " << report.renames.size() << " keys (e.g. '" << report.renames.front().from << "' -> '"
      << report.renames.front().to << "')";
    lines.push_back(s.str());
  }
  for (const std::string& a : report.auto_stripped) lines.push_back("stripped wrapper prefix " + a);
  for (const auto& [move, count] : report.retagged) {
    lines.push_back("retagged " + std::to_string(count) + " storage" + (count == 1 ? "" : "s") + " " + move);
  }
  if (report.storages_cast > 0) {
    std::ostringstream s;
    s << "cast " << report.tensors_cast << " tensors in " << report.storages_cast << " storages, "
      << human_bytes(report.cast_bytes_before) << " -> " << human_bytes(report.cast_bytes_after);
    if (saved != nullptr) {
      uint64_t overflowed = 0, flushed = 0;
      for (const WrittenStorage& w : saved->storages) {
        overflowed += w.overflowed;
        flushed += w.flushed;
      }
      // float8_e4m3fn has no infinity: torch >= 2.13 saturates to ±448
      // instead, earlier releases make NaN.
      const bool e4m3 = report.cast_to == DType::kFloat8E4M3Fn;
      const bool saturates = e4m3 && float8_e4m3fn_saturates(report.cast_torch);
      s << "; " << overflowed
        << (saturates ? " values saturated to ±448, "
            : e4m3    ? " values overflowed to NaN (torch " + report.cast_torch.str() + "), "
                      : " values overflowed to inf, ")
        << flushed << " became 0";
    }
    lines.push_back(s.str());
  }
  if (report.tensors_kept > 0) lines.push_back("kept " + std::to_string(report.tensors_kept) + " tensors (--keep)");
  return lines;
}

// Beyond this many keys moved, made or left out, the text report says them
// by rule, a few each (--json lists every one).
constexpr size_t kFitKeyLines = 200;

// A line per key the fit moved, made or left out, for the text report.
std::string fit_key_lines(const PassReport& report) {
  if (!report.fit) return {};
  const FitReport& f = *report.fit;
  std::vector<const KeyMove*> all;
  for (const auto* list : {&f.moved, &f.added, &f.dropped}) {
    for (const KeyMove& m : *list) all.push_back(&m);
  }
  auto line = [](const KeyMove& m) {
    if (m.from.empty()) return "made '" + m.to + "' (" + m.rule + ")";
    if (m.to.empty()) return "left out '" + m.from + "' (" + m.rule + ")";
    return "'" + m.from + "' -> '" + m.to + "' (" + m.rule + ")";
  };
  std::string out;
  if (all.size() <= kFitKeyLines) {
    for (const KeyMove* m : all) out += "ckptfix:   " + detail_text(line(*m)) + "\n";
  } else {
    std::map<std::string, std::vector<const KeyMove*>> by_rule;
    for (const KeyMove* m : all) by_rule[m->rule].push_back(m);
    for (const auto& [rule, moves] : by_rule) {
      out += "ckptfix:   " + std::to_string(moves.size()) + " keys: " + detail_text(line(*moves.front()));
      out += moves.size() > 1 ? ", ... (--json lists every one)\n" : "\n";
    }
  }
  if (!f.missing.empty()) {
    std::string keys;
    for (size_t i = 0; i < f.missing.size() && i < 20; ++i) keys += (i ? ", '" : "'") + f.missing[i] + "'";
    if (f.missing.size() > 20) keys += " and " + std::to_string(f.missing.size() - 20) + " more";
    out += "ckptfix:   missing (allowed): " + printable(keys) + "\n";
  }
  return out;
}

nlohmann::json fit_json(const FitReport& f) {
  auto moves = [](const std::vector<KeyMove>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const KeyMove& m : list) {
      nlohmann::json j = {{"rule", detail_text(m.rule)}};
      if (!m.from.empty()) j["from"] = m.from;
      if (!m.to.empty()) j["to"] = m.to;
      out.push_back(std::move(j));
    }
    return out;
  };
  return {{"reference", f.reference}, {"state_dict", path_to_json(f.state_dict)},
          {"moved", moves(f.moved)},  {"added", moves(f.added)},
          {"dropped", moves(f.dropped)}, {"missing", f.missing},
          {"kept", f.kept},           {"tensors_cast", f.tensors_cast},
          {"left_out_of_file", f.left_out_of_file}, {"changed", f.changed}};
}

nlohmann::json changes_json(const PassReport& report, const SaveResult* saved) {
  nlohmann::json renames = nlohmann::json::array();
  for (const KeyRename& r : report.renames) {
    renames.push_back({{"dict", path_to_json(r.dict)}, {"from", r.from}, {"to", r.to}});
  }
  nlohmann::json retagged = nlohmann::json::object();
  for (const auto& [move, count] : report.retagged) retagged[move] = count;
  uint64_t overflowed = 0, flushed = 0;
  if (saved != nullptr) {
    for (const WrittenStorage& w : saved->storages) {
      overflowed += w.overflowed;
      flushed += w.flushed;
    }
  }
  const bool e4m3 = report.cast_to == DType::kFloat8E4M3Fn;
  const bool saturates = float8_e4m3fn_saturates(report.cast_torch);
  nlohmann::json dicts = nlohmann::json::array();
  for (const Path& p : report.dicts) dicts.push_back(path_to_json(p));
  nlohmann::json repaired = nlohmann::json::array();
  for (const ValueChange& c : report.repaired) {
    repaired.push_back({{"path", path_to_json(c.path)}, {"was", c.was}, {"became", c.became}});
  }
  return {{"repaired", repaired},
          {"extracted", report.extracted ? nlohmann::json(*report.extracted) : nlohmann::json()},
          {"fit", report.fit ? fit_json(*report.fit) : nlohmann::json()},
          {"for_libtorch", report.for_libtorch},
          {"dicts", dicts},
          {"keys_renamed", report.renames.size()},
          {"renames", renames},
          {"auto_stripped", report.auto_stripped},
          {"storages_retagged", report.storages_retagged},
          {"retagged", retagged},
          {"tensors_cast", report.tensors_cast},
          {"storages_cast", report.storages_cast},
          {"tensors_kept", report.tensors_kept},
          {"cast_bytes_before", report.cast_bytes_before},
          {"cast_bytes_after", report.cast_bytes_after},
          {"overflowed_to_inf", e4m3 ? uint64_t{0} : overflowed},
          {"saturated_to_max", e4m3 && saturates ? overflowed : uint64_t{0}},
          {"overflowed_to_nan", e4m3 && !saturates ? overflowed : uint64_t{0}},
          {"cast_torch", report.cast_torch.str()},
          {"flushed_to_zero", flushed}};
}

std::string unknown_globals_warning(const std::vector<std::string>& names) {
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i ? ", " : "") + names[i];
  return "kept " + std::to_string(names.size()) + " global" + (names.size() == 1 ? "" : "s") +
         " ckptfix does not know as data (" + list +
         "): loading the output with weights_only=False runs their code, so it is only as trustworthy as the input";
}

std::string trusted_call_warning(const GlobalRef& g) {
  return "the output calls '" + g.dotted() + "' (" + g.how + (g.where.empty() ? "" : " at " + g.where) +
         "), trusted by --allow-global: loading it with weights_only=False runs that code";
}

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

}  // namespace

void add_rewrite_options(CLI::App* cmd, RewriteArgs& args, bool may_replace_input) {
  add_batch_options(cmd, args.batch);
  cmd->add_option("-o,--output", args.output, "Output file (one input)");
  cmd->add_option("--out-dir", args.out_dir,
                  "Write each output under DIR: the input's file name, or its path below a --recursive directory");
  args.in_place_offered = may_replace_input;
  if (may_replace_input) {
    cmd->add_flag("--in-place", args.in_place, "Replace each input, only once its new version is complete and if nothing changed it meanwhile");
  }
  cmd->add_flag("-f,--force", args.force, "Overwrite existing outputs");
  cmd->add_flag("--sync", args.sync,
                may_replace_input
                    ? "fsync each output (and its directory) so it also survives a power loss; --in-place always does"
                    : "fsync each output (and its directory) so it also survives a power loss");
  if (may_replace_input) {
    cmd->add_flag("--no-verify", args.no_verify, "Skip verifying each written file before it replaces anything");
  }
  cmd->add_option("--gpu", args.gpu, "GPU load test during verification: auto (default), require or off");
  cmd->add_option("--threads", args.batch.threads,
                  "Threads in all (default: one per core; for one file at most 16): a large file's records are "
                  "split among them; with --jobs, the files at once share them")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--format", args.format,
                  "Output format: pt (torch zip), safetensors, or dcp (a torch.distributed.checkpoint directory, "
                  "-o naming it); default: from the output's extension (.safetensors; .pt, .pth, .bin, .ckpt), "
                  "else the input's format")
      ->check(CLI::IsMember({"pt", "safetensors", "dcp"}));
  cmd->add_flag("--drop-aliases", args.drop_aliases,
                "safetensors: write keys that are the same tensor once, under the sorted-first name (as "
                "safetensors.torch.save_model), recording the others in __metadata__");
  cmd->add_option("--metadata", args.metadata, "safetensors: KEY=VALUE for __metadata__ (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option_function<std::string>(
      "--torch", [&args](const std::string& version) { args.torch = version; },
      torch_option_help("the output is for: what a cast gives where releases differ (float8_e4m3fn overflow), "
                        "what weights-only keeps, and which dtypes the output may hold"));
  cmd->add_option_function<std::string>(
      "--max-shard-size", [&args](const std::string& size) { args.max_shard_size = size; },
                  "Write a Hugging Face shard set (-o DIR/model.safetensors, or DIR/pytorch_model.bin for torch.save "
                  "shards): files of at most SIZE (5GB, 500MB decimal; 2GiB binary) and their index.json");
  cmd->add_option("--allow-global", args.allow_globals,
                  "Trust calls of globals matching this pattern (fnmatch on module.qualname, e.g. 'mypkg.*'; "
                  "repeatable): by default an output whose pickle calls a global ckptfix does not know as data "
                  "is refused")
      ->allow_extra_args(false);
}

TorchVersion parse_user_torch(const std::string& text) {
  const auto modeled = modeled_torch_versions();
  const auto v = TorchVersion::parse(text);
  if (!v || std::find(modeled.begin(), modeled.end(), *v) == modeled.end()) {
    throw usage("--torch '" + text + "': ckptfix models torch " + modeled.front().str() + " and " + modeled[1].str() +
                " to " + modeled.back().str() + " (e.g. --torch 2.6)");
  }
  return *v;
}

std::string torch_option_help(const std::string& what) {
  const auto modeled = modeled_torch_versions();
  return "The torch release (" + modeled.front().str() + ", " + modeled[1].str() + " to " + modeled.back().str() +
         "; default " + default_torch_version().str() + ") " + what;
}

void add_key_option(CLI::App* cmd, PassOptions& passes) {
  cmd->add_option("--key", passes.keys,
                  "Edit only the dict at this '/'-separated path (repeatable), e.g. state_dict; "
                  "default: every state dict outside optimizer states")
      ->allow_extra_args(false);
}

void add_remap_options(CLI::App* cmd, PassOptions& passes, std::vector<std::string>& maps) {
  cmd->add_option_function<std::string>(
      "--to", [&passes](const std::string& d) { passes.to_device = d; },
      "Saved location for every storage: cpu, cuda, cuda:N, mps, meta, xpu:N, ...");
  cmd->add_option("--map", maps, "FROM=TO: retag storages saved on FROM (repeatable), e.g. cuda:3=cuda:0")
      ->allow_extra_args(false);
}

void add_cast_options(CLI::App* cmd, std::string& dtype, std::vector<std::string>& from, PassOptions& passes,
                      bool required) {
  auto* opt = cmd->add_option("--dtype", dtype, "Target type: " + dtype_choices());
  if (required) opt->required();
  cmd->add_option("--from", from, "Only cast these source types (comma-separated; default: every float type)")
      ->allow_extra_args(false)
      ->delimiter(',');
  cmd->add_option("--keep", passes.keep, "Leave tensors whose key matches this glob as they are (repeatable)")
      ->allow_extra_args(false);
}

void finish_remap_options(const std::vector<std::string>& maps, PassOptions& passes) {
  for (const std::string& m : maps) {
    const auto eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) throw usage("--map '" + m + "': expected FROM=TO");
    passes.device_map.emplace_back(m.substr(0, eq), m.substr(eq + 1));
  }
}

void finish_cast_options(const std::string& dtype, const std::vector<std::string>& from, PassOptions& passes) {
  if (!dtype.empty()) passes.cast_to = parse_user_dtype(dtype, "--dtype");
  for (const std::string& f : from) passes.cast_from.push_back(parse_user_dtype(f, "--from"));
}

OpenOptions rewrite_open_options(const RewriteArgs& args, const PassOptions& passes) {
  OpenOptions open = open_options(args.batch.limits);
  // The weights-only repair streams numpy arrays' bytes from the input.
  open.leave_payloads_in_file = passes.weights_only;
  return open;
}

int run_rewrite(const std::string& command, const RewriteArgs& args, const PassOptions& passes,
                const InputReader& read) {
  SaveOptions save_options;
  std::vector<std::pair<std::string, std::string>> metadata;
  uint64_t max_shard_size = 0;
  std::vector<Input> inputs;
  OpenOptions open;
  std::optional<ValidPassOptions> valid_passes;  // checked once, before any input is read
  try {
    open = rewrite_open_options(args, passes);
    inputs = expand_inputs(args.batch);
    validate_outputs(args, inputs);
    PassOptions for_target = passes;
    if (args.torch) for_target.torch = parse_user_torch(*args.torch);
    valid_passes = validate_pass_options(std::move(for_target));
    save_options.verify = !args.no_verify;
    save_options.dispose = [](std::shared_ptr<void> done_with) { dispose_of(std::move(done_with)); };
    save_options.allow_globals = args.allow_globals;
    for (const std::string& p : args.allow_globals) {
      if (p.empty()) throw usage("--allow-global needs a non-empty pattern");
    }
    save_options.libtorch_pickle = passes.for_libtorch;
    save_options.threads = threads_per_job(args.batch, inputs.size());
    save_options.verify_options.gpu = parse_gpu_mode(args.gpu);
    metadata = parse_metadata(args.metadata);
    if (args.max_shard_size) max_shard_size = parse_size(*args.max_shard_size);
    if (args.format == "safetensors" && passes.for_libtorch) throw usage("--for-libtorch writes a torch file, not safetensors");
    if (args.format == "dcp") {
      if (passes.for_libtorch) throw usage("--for-libtorch writes a torch file, not a distributed checkpoint");
      if (args.in_place) throw usage("--in-place rewrites a file as it is; --format dcp writes a directory: give -o DIR");
      if (args.drop_aliases || !metadata.empty() || max_shard_size > 0) {
        throw usage(std::string(args.drop_aliases ? "--drop-aliases" : !metadata.empty() ? "--metadata" : "--max-shard-size") +
                    " does not apply to a distributed checkpoint (--format dcp)");
      }
    }
#ifdef CKPTFIX_FAULT_INJECTION
    g_seams = test_fault_seams();
#endif
    if (save_options.verify) require_gpu_if_asked(save_options.verify_options.gpu);
  } catch (const Error& e) {
    print_error(e);
    return exit_code_for(e);
  }

  OutputDirectories directories;
  const BatchResult result = run_batch(inputs, args.batch, [&](const Input& input, Progress& progress) {
    const std::filesystem::path output = output_for(args, input);
    Outcome o;
    o.doc = {{"path", input.path}, {"output", output.string()}};
    try {
      // The input as its reader makes it: once here, and again for each shard of a torch shard set.
      auto read_as_given = [&](Outcome& told) {
        return read ? read(input.path, open, told) : ReadInput{Checkpoint::open(input.path, open), {}};
      };
      ReadInput read_input = read_as_given(o);
      Checkpoint& checkpoint = read_input.checkpoint;
      PassReport report = apply_passes(checkpoint, *valid_passes);
      // The JSON of every change is printed only with --json; a fit of
      // 100,000 keys made it a few percent of the rewrite's time.
      auto changes = [&](const SaveResult* saved) {
        return args.batch.json ? changes_json(report, saved) : nlohmann::json::object();
      };
      const bool dcp = args.format == "dcp";
      const bool safetensors = !dcp && !passes.for_libtorch && writes_safetensors(args, output, checkpoint);
      std::vector<std::string> warnings = report.warnings;
      std::vector<std::string> unknown;
      nlohmann::json trusted = nlohmann::json::array();
      if (!safetensors) {  // a safetensors file holds no pickle, so it calls and keeps no global
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
      if (args.in_place && checkpoint.format() == CheckpointFormat::kShardIndex) {
        throw usage("--in-place cannot rewrite a shard set; write a new one with -o DIR/model.safetensors "
                    "--max-shard-size SIZE");
      }
      if (args.in_place && (checkpoint.format() == CheckpointFormat::kDcp || checkpoint.format() == CheckpointFormat::kZero)) {
        throw usage(std::string("--in-place cannot rewrite a ") +
                    (checkpoint.format() == CheckpointFormat::kDcp ? "distributed" : "DeepSpeed") +
                    " checkpoint directory; write one file with -o FILE.pt (or .safetensors)");
      }
      // A torch output takes --max-shard-size when it is named as
      // transformers names its shard sets (pytorch_model.bin).
      const bool torch_shards = !safetensors && !dcp && max_shard_size > 0 && output.extension() == ".bin";
      if (!safetensors && (args.drop_aliases || !metadata.empty() || (max_shard_size > 0 && !torch_shards))) {
        throw usage(std::string(args.drop_aliases ? "--drop-aliases" : !metadata.empty() ? "--metadata" : "--max-shard-size") +
                    " applies to safetensors outputs" + (args.drop_aliases || !metadata.empty() ? "" : " and to .bin shard sets") +
                    ", and '" + output.string() + "' is written as a torch file");
      }
      const CheckpointFormat written_as = safetensors ? CheckpointFormat::kSafetensors
                                          : dcp       ? CheckpointFormat::kDcp
                                                      : CheckpointFormat::kZip;
      // Nothing to change and nothing to convert: leave an in-place input alone.
      const bool needs_write = report.changed() || !read_input.lines.empty() || !args.in_place ||
                               checkpoint.format() != written_as ||
                               !metadata.empty();
      if (!needs_write) {
        o.status = OutcomeStatus::kUnchanged;
        o.doc["changes"] = changes(nullptr);
        o.doc["verification"] = {{"status", "skipped"}, {"reason", "nothing was written"}};
        o.err += "ckptfix: " + printable(input.path) + ": nothing to change" +
                 (report.fit ? "; it fits the model of '" + printable(report.fit->reference) + "' as it is" : "") + "\n";
      } else {
        SaveOptions options = save_options;
        options.overwrite = args.force || args.in_place;
        // Replacing the input destroys the only other copy: make it durable.
        options.sync = args.sync || args.in_place;
        options.progress = [&progress, last = std::string()](std::string_view phase, uint64_t done,
                                                             uint64_t total) mutable {
          if (phase != last) progress.phase(last = std::string(phase), total);
          progress.update(done);
        };
        if (!output.parent_path().empty()) directories.create(output.parent_path());
        // What was written, for the two report lines and the JSON.
        std::vector<std::string> lines;
        std::string written = output.string();  // the file the verification line names (a set: its index)
        uint64_t bytes = 0;
        std::optional<VerifyReport> verification;
        size_t shard_count = 0;  // a torch shard set's shards
        if (safetensors) {
          SafetensorsOptions st;
          st.drop_aliases = args.drop_aliases;
          st.metadata = metadata;
          st.overwrite = options.overwrite;
          st.sync = options.sync;
          st.verify = options.verify;
          st.verify_options = options.verify_options;
          st.progress = options.progress;
          st.threads = options.threads;
          st.max_shard_size = max_shard_size;
          const SafetensorsResult saved = save_safetensors_output(checkpoint, output, st);
          o.doc["changes"] = changes(nullptr);
          o.doc["format"] = "safetensors";
          o.doc["shared"] = saved.shared;
          nlohmann::json dropped = nlohmann::json::array();
          for (const auto& [gone, kept] : saved.dropped) dropped.push_back({{"key", gone}, {"kept", kept}});
          o.doc["dropped_aliases"] = dropped;
          o.doc["files"] = saved.files;
          lines.push_back(saved.files.size() > 1 ? "safetensors shard set, " + std::to_string(saved.files.size() - 1) +
                                                       " shards and an index, " + std::to_string(saved.tensors) + " tensors"
                                                 : "safetensors, " + std::to_string(saved.tensors) + " tensors");
          for (const std::string& line : describe(report, nullptr)) lines.push_back(line);
          for (const auto& group : saved.shared) {
            std::string keys;
            for (const std::string& k : group) keys += (keys.empty() ? "'" : ", '") + k + "'";
            lines.push_back(keys + " share their bytes: written once per key");
          }
          for (const auto& [gone, kept] : saved.dropped) lines.push_back("dropped alias '" + gone + "' of '" + kept + "'");
          if (!saved.files.empty()) written = saved.files.back();
          bytes = saved.bytes;
          verification = saved.verification;
        } else if (dcp) {
          const DcpSaveResult saved = save_dcp(checkpoint, output, options);
          o.doc["changes"] = changes(nullptr);
          o.doc["format"] = "dcp";
          o.doc["files"] = saved.files;
          lines.push_back("distributed checkpoint, " + std::to_string(saved.tensors) + " tensors and " +
                          std::to_string(saved.values) + " other values in " + saved.files.front());
          for (const std::string& line : describe(report, nullptr)) lines.push_back(line);
          bytes = saved.bytes;
          verification = saved.verification;
        } else if (torch_shards) {
          // Each shard from the input read again with the same passes (save.h).
          auto reopen = [&] {
            Outcome scratch;  // the first reading already said what reading says
            ReadInput again = read_as_given(scratch);
            apply_passes(again.checkpoint, *valid_passes);
            return std::move(again.checkpoint);
          };
          const TorchShardSetResult saved = save_torch_shard_set(checkpoint, reopen, output, options, max_shard_size);
          o.doc["changes"] = changes(nullptr);
          o.doc["files"] = saved.files;
          lines.push_back(saved.files.size() > 1 ? "torch shard set, " + std::to_string(saved.files.size() - 1) +
                                                       " shards and an index, " + std::to_string(saved.tensors) + " keys"
                                                 : "one torch file (the state dict fits in one shard), " +
                                                       std::to_string(saved.tensors) + " keys");
          for (const std::string& line : describe(report, nullptr)) lines.push_back(line);
          if (!saved.files.empty()) written = saved.files.back();
          bytes = saved.bytes;
          if (!saved.verifications.empty()) verification = saved.verifications.back();
          shard_count = saved.files.size() > 1 ? saved.files.size() - 1 : 0;
        } else {
          SaveResult saved = save_output(checkpoint, output, options);
          o.doc["changes"] = changes(&saved);
          lines = describe(report, &saved);
          bytes = saved.bytes;
          verification = saved.verification;
          dispose_of(std::move(saved));  // a record and a storage per tensor
        }
        const size_t first = safetensors || torch_shards || dcp ? 1 : 0;  // after the line saying what it is
        lines.insert(lines.begin() + first, read_input.lines.begin(), read_input.lines.end());
        const bool converted = checkpoint.format() != written_as;
        if (converted) {
          // After a safetensors output's first line (what it is), before the rest.
          lines.insert(lines.begin() + first, "converted from " + std::string(format_name(checkpoint.format())));
        }
        o.status = report.changed() || !read_input.lines.empty() || ((safetensors || dcp) && converted) || shard_count > 1
                       ? OutcomeStatus::kOk
                       : OutcomeStatus::kUnchanged;
        o.doc["verification"] = verification_json(verification);
        o.doc["bytes_written"] = bytes;
        std::string line = "ckptfix: " + printable(input.path) + " -> " + printable(output.string()) + ": ";
        if (lines.empty()) line += command == "convert" ? "re-written, nothing else to change" : "nothing to change; written as is";
        for (size_t i = 0; i < lines.size(); ++i) line += (i ? "; " : "") + lines[i];
        o.err += printable(line) + " (" + human_bytes(bytes) + ")\n";
        o.err += fit_key_lines(report);
        std::string verified = verification ? "verified: " + verification->summary() : "not verified (--no-verify)";
        if (verification && shard_count > 1) {
          verified = "verified: each of the " + std::to_string(shard_count) + " shards read back; the last: " +
                     verification->summary();
        }
        o.err += "ckptfix: " + printable(written) + ": " + verified + "\n";
      }
      o.doc["status"] = status_name(o.status);
      dispose_of(std::move(read_input.checkpoint));
      dispose_of(std::move(report));  // a fit's: every key moved
    } catch (Error& e) {
      e.in_file(input.path);  // pass errors know the key but not the file
      return failed_with(o, failed_outcome(input, e));
    } catch (const std::filesystem::filesystem_error& e) {
      return failed_with(o, failed_outcome(input, Error(ErrorKind::kIo, e.code().message()).in_file(e.path1().string())));
    }
    return o;
  });
  directories.remove_empty();
  return finish_batch(command, args.batch, result);
}

}  // namespace ckptfix::cli

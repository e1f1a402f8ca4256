// The options the rewriting commands share, and their values parsed.
#include <algorithm>
#include <map>
#include <cctype>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckptfix/error.h"
#include "cli/report.h"
#include "cli/rewrite.h"

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


}  // namespace ckptfix::cli

// ckptfix inspect FILE... [--json]: what a checkpoint holds, without loading it.
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "ckptfix/checkpoint.h"
#include "ckptfix/nested.h"
#include "ckptfix/stats.h"
#include "ckptfix/prefixes.h"
#include "ckptfix/check.h"
#include "ckptfix/state_dict.h"
#include "ckptfix/weights_only.h"
#include "cli/batch.h"
#include "cli/commands.h"
#include "cli/inspect_text.h"
#include "cli/report.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {
namespace {

struct Totals {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

nlohmann::json stat_json(const StatValue& v) {
  switch (v.kind) {
    case StatValue::Kind::kFloat: return v.f;
    case StatValue::Kind::kSigned: return v.i;
    case StatValue::Kind::kUnsigned: return v.u;
    case StatValue::Kind::kNone: break;
  }
  return nullptr;
}

nlohmann::json stats_json(const TensorStats& t) {
  if (!t.computed) return nullptr;
  return {{"nan", t.nan},
          {"posinf", t.posinf},
          {"neginf", t.neginf},
          {"min", stat_json(t.min)},
          {"max", stat_json(t.max)},
          {"mean", t.mean ? nlohmann::json(*t.mean) : nlohmann::json()},
          {"absmax", stat_json(t.absmax)}};
}

nlohmann::json describe(const Checkpoint& ck, TorchVersion torch, const StatsReport* stats, nlohmann::json& all_tensors) {
  nlohmann::json doc;
  doc["path"] = ck.file_name();
  doc["status"] = "ok";
  doc["format"] = format_name(ck.format());
  doc["archive_root"] = ck.format() == CheckpointFormat::kZip ? nlohmann::json(ck.archive_root()) : nlohmann::json();
  doc["byte_order"] = ck.big_endian() ? "big" : "little";
  doc["pickle_protocol"] = ck.pickle_protocol();
  doc["file_bytes"] = ck.file_size();
  if (ck.format() == CheckpointFormat::kShardIndex) doc["shards"] = ck.shard_files();
  if (const auto& run = ck.zero_run()) {
    doc["zero"] = {{"stage", run->stage}, {"ranks", run->ranks}, {"bf16_files", run->bf16_files},
                   {"deepspeed_version", run->deepspeed_version}, {"tag", run->tag}, {"files", ck.shard_files()}};
  }
  if (ck.format() == CheckpointFormat::kSafetensors) {
    nlohmann::json metadata = nlohmann::json::object();
    if (ck.safetensors_metadata()) {
      for (const auto& [k, v] : *ck.safetensors_metadata()) metadata[k] = v;
    }
    doc["safetensors_metadata"] = ck.safetensors_metadata() ? metadata : nlohmann::json();
  }

  const auto& storages = ck.storages();
  const auto& tensors = ck.tensors();
  std::map<std::string, Totals> by_dtype, by_device;
  uint64_t total_bytes = 0;
  for (const StorageInfo& s : storages) {
    auto& d = by_device[s.location];
    ++d.count;
    d.bytes += s.nbytes;
    total_bytes += s.nbytes;
  }
  for (const TensorInfo& t : tensors) {
    auto& d = by_dtype[std::string(dtype_name(t.dtype))];
    ++d.count;
    if (t.kind != TensorKind::kMeta) d.bytes += t.nbytes();  // a meta tensor holds no bytes
  }
  doc["tensor_count"] = tensors.size();
  doc["storage_count"] = storages.size();
  doc["storage_bytes"] = total_bytes;
  for (const auto& [name, t] : by_dtype) doc["by_dtype"][name] = {{"tensors", t.count}, {"bytes", t.bytes}};
  for (const auto& [name, t] : by_device) doc["by_device"][name] = {{"storages", t.count}, {"bytes", t.bytes}};
  if (by_dtype.empty()) doc["by_dtype"] = nlohmann::json::object();
  if (by_device.empty()) doc["by_device"] = nlohmann::json::object();

  doc["state_dicts"] = nlohmann::json::array();
  doc["sparse_tensors"] = nlohmann::json::array();
  doc["extra_states"] = nlohmann::json::array();
  for (const StateDictInfo& sd : ck.state_dicts()) {
    const auto& keys = sd.keys;
    doc["state_dicts"].push_back({{"path", path_to_json(sd.path)},
                                  {"keys", sd.size},
                                  {"sparse_tensors", sd.sparse_tensors},
                                  {"extra_states", sd.extra_states},
                                  {"wrapper_prefix", shared_wrapper_prefix(keys)},
                                  {"in_optimizer", sd.in_optimizer}});
    if (sd.sparse_tensors == 0 && sd.extra_states == 0) continue;
    // What is neither a dense tensor nor listed with the tensors: sparse
    // tensors (their parts are), and modules' extra states that are data.
    std::vector<StateDictEntry> entries;
    try {
      entries = select_state_dict(ck, path_to_string(sd.path));
    } catch (const Error&) {  // a path its own keys make ambiguous ('/' in a key): listed without them
      continue;
    }
    for (const StateDictEntry& e : entries) {
      Path path = sd.path;
      path.emplace_back(e.key);
      if (e.kind == StateDictEntry::Kind::kSparseTensor) {
        const TensorInfo& values = tensors[e.sparse.parts.back()];
        doc["sparse_tensors"].push_back({{"path", path_to_json(path)},
                                         {"layout", e.sparse.layout},
                                         {"dtype", dtype_name(values.dtype)},
                                         {"size", e.sparse.size},
                                         {"nnz", values.shape.empty() ? 1 : values.shape.front()},
                                         {"device", storages[static_cast<size_t>(values.storage)].location}});
      } else if (e.kind == StateDictEntry::Kind::kData) {
        doc["extra_states"].push_back({{"path", path_to_json(path)}, {"holds", e.holds}});
      }
    }
  }
  doc["globals"] = nlohmann::json::array();
  for (const GlobalRef& g : ck.globals()) {
    nlohmann::json j = global_use_json(g);
    j["safe"] = g.weights_only(torch);
    if (g.kind == GlobalKind::kWeightsOnly) j["allowed_since"] = g.allowed_since.str();
    if (!g.exists_in_torch_1_13) j["in_torch_1_13"] = false;  // only then: a file may name 10^5 globals
    doc["globals"].push_back(std::move(j));
  }
  // Pickles inside values (a module's extra state), which a model unpickles
  // after torch.load: each read, never run, with what it would call.
  doc["nested_pickles"] = nlohmann::json::array();
  const std::vector<NestedPickle> nested = nested_pickles(ck);
  const std::vector<NestedViolation> refused = nested_violations(nested, {});
  for (const NestedPickle& p : nested) {
    nlohmann::json j = {{"key", p.key},       {"path", path_to_json(p.path)}, {"holder", p.holder},
                        {"form", to_string(p.form)}, {"bytes", p.bytes},  {"depth", p.depth},
                        {"tensors", p.tensors}};
    j["globals"] = nlohmann::json::array();
    for (const GlobalRef& g : p.globals) j["globals"].push_back(global_use_json(g));
    j["unreadable"] = p.unreadable.empty() ? nlohmann::json() : nlohmann::json(p.unreadable);
    j["refused"] = nlohmann::json::array();
    for (const NestedViolation& v : refused) {
      if (v.key == p.key) j["refused"].push_back(v.what);
    }
    doc["nested_pickles"].push_back(std::move(j));
  }
  doc["weights_only"] = weights_only_json(weights_only_verdict(ck, torch));
  doc["weights_only"]["torch"] = torch.str();
  // Every release ckptfix models, the same verdicts merged into runs.
  doc["weights_only_by_torch"] = nlohmann::json::array();
  for (const WeightsOnlyRange& r : weights_only_by_release(ck)) {
    nlohmann::json j = weights_only_json(r.verdict);
    j["from"] = r.from.str();
    j["to"] = r.to.str();
    doc["weights_only_by_torch"].push_back(std::move(j));
  }

  doc["storages"] = nlohmann::json::array();
  for (const StorageInfo& s : storages) {
    doc["storages"].push_back({{"key", s.key},
                               {"dtype", dtype_name(s.dtype)},
                               {"numel", s.numel},
                               {"nbytes", s.nbytes},
                               {"device", s.location},
                               {"record", s.source.record}});
  }
  for (const TensorPosition& pos : ck.tensor_positions()) {
    const TensorInfo& t = tensors[pos.tensor];
    const bool meta = t.kind == TensorKind::kMeta;  // no storage, no data
    all_tensors.push_back({{"file", ck.file_name()},
                           {"path", path_to_json(pos.path)},
                           {"dtype", dtype_name(t.dtype)},
                           {"shape", t.shape},
                           {"stride", t.stride},
                           {"storage_offset", t.storage_offset},
                           {"device", meta ? std::string("meta") : storages[static_cast<size_t>(t.storage)].location},
                           {"nbytes", meta ? uint64_t{0} : t.nbytes()},
                           {"storage", meta ? nlohmann::json() : nlohmann::json(storages[static_cast<size_t>(t.storage)].key)},
                           {"requires_grad", t.requires_grad},
                           {"parameter", t.parameter},
                           {"quantized", t.kind == TensorKind::kQuantized},
                           {"meta", meta}});
    if (stats != nullptr) all_tensors.back()["stats"] = stats_json(stats->tensors[pos.tensor]);
  }
  if (stats != nullptr) {
    doc["stats"] = {{"bytes", stats->bytes}, {"seconds", stats->seconds}};
  }
  return doc;
}

struct InspectArgs {
  BatchArgs batch;
  std::optional<std::string> torch;  // --torch VERSION
  bool stats = false;                // --stats
};

int run(const InspectArgs& inspect) {
  const BatchArgs& args = inspect.batch;
  std::vector<Input> inputs;
  OpenOptions open;
  TorchVersion torch = default_torch_version();
  std::optional<JsonReport> report;
  try {
    open = open_options(args.limits);
    if (inspect.torch) torch = parse_user_torch(*inspect.torch);
    inputs = expand_inputs(args);
    report.emplace("inspect", args.json, args.report);
    report->end_with_list("tensors");
  } catch (const Error& e) {
    print_error(e);
    return exit_code_for(e);
  }
  const BatchResult result = run_batch(inputs, args, [&](const Input& input, Progress&) {
    try {
      Checkpoint ck = Checkpoint::open(input.path, open);
      nlohmann::json tensors = nlohmann::json::array();
      Outcome o;
      std::optional<StatsReport> stats;
      if (inspect.stats) stats = tensor_stats(ck);
      o.doc = describe(ck, torch, stats ? &*stats : nullptr, tensors);
      o.doc["tensors"] = std::move(tensors);  // moved to the top level's list as it is reported
      if (!args.json) {
        std::ostringstream text;
        print_human(ck, torch, stats ? &*stats : nullptr, o.doc, text);
        o.out = text.str();
      }
      return o;
    } catch (const Error& e) {
      return failed_outcome(input, with_salvage_hint(e, input.path, open));
    }
  }, *report, [&](Outcome& o) {
    // One top-level list of tensors over all inputs, each naming its file.
    if (!o.doc.contains("tensors")) return;
    for (const auto& t : o.doc["tensors"]) report->add_to_list(t);
    o.doc.erase("tensors");
  });
  return finish_batch("inspect", args, result, *report);
}

}  // namespace

CommandRun register_inspect(CLI::App& app) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show what a checkpoint holds (format, tensors, state dicts, globals)");
  add_batch_options(cmd, args->batch);
  cmd->add_option_function<std::string>(
      "--torch", [args](const std::string& v) { args->torch = v; },
      torch_option_help("whose default torch.load the verdict is for (every release's is shown too)"));
  cmd->add_flag("--stats", args->stats,
                "Read every tensor and show its health: NaN, +inf and -inf counts, and min, max, mean and absmax of "
                "its finite values");
  return [args] { return run(*args); };
}

}  // namespace ckptfix::cli

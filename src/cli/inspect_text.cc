// print_human (cli/inspect_text.h): what inspect prints for people.
#include "cli/inspect_text.h"

#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "ckptfix/check.h"
#include "ckptfix/nested.h"
#include "ckptfix/prefixes.h"
#include "ckptfix/state_dict.h"
#include "cli/report.h"

namespace ckptfix::cli {
namespace {

std::string stat_text(const StatValue& v) {
  switch (v.kind) {
    case StatValue::Kind::kFloat: {
      std::ostringstream s;
      s << std::setprecision(6) << v.f;
      return s.str();
    }
    case StatValue::Kind::kSigned: return std::to_string(v.i);
    case StatValue::Kind::kUnsigned: return std::to_string(v.u);
    case StatValue::Kind::kNone: break;
  }
  return "-";
}

std::vector<std::string> stats_cells(const TensorStats& t) {
  if (!t.computed) return {"-", "-", "-", "-", "-", "-", "-"};
  std::ostringstream mean;
  if (t.mean) mean << std::setprecision(6) << *t.mean;
  return {std::to_string(t.nan), std::to_string(t.posinf), std::to_string(t.neginf), stat_text(t.min),
          stat_text(t.max), t.mean ? mean.str() : "-", stat_text(t.absmax)};
}

// Everything from the file (names, keys, devices) goes through printable():
// a key cannot move the cursor, clear the screen or start a line of its own.
Path path_from_json(const nlohmann::json& j) {
  Path path;
  for (const auto& e : j) {
    if (e.is_string()) path.emplace_back(e.get<std::string>());
    else path.emplace_back(e.get<int64_t>());
  }
  return path;
}

}  // namespace

void print_human(const Checkpoint& ck, TorchVersion torch, const StatsReport* stats, const nlohmann::json& doc,
                 std::ostream& out) {
  out << printable(ck.file_name()) << ": " << format_name(ck.format()) << " checkpoint";
  if (ck.format() == CheckpointFormat::kZip) out << ", archive root '" << printable(ck.archive_root()) << "'";
  if (const auto& run = ck.zero_run()) {
    out << ": stage " << run->stage << ", " << run->ranks << " data-parallel ranks"
        << (run->bf16_files ? ", bf16 training" : "") << ", tag '" << printable(run->tag) << "', DeepSpeed "
        << printable(run->deepspeed_version.empty() ? "?" : run->deepspeed_version)
        << "; the trainable parameters are its fp32 master weights\n";
    for (const std::string& f : ck.shard_files()) out << "  also read: " << printable(f) << "\n";
  } else if (ck.format() == CheckpointFormat::kShardIndex) {
    out << " of " << ck.shard_files().size() << " shards, no pickle\n";
    for (const std::string& f : ck.shard_files()) out << "  shard: " << printable(f) << "\n";
  } else if (ck.format() == CheckpointFormat::kSafetensors) {
    out << ", no pickle\n";
    if (ck.safetensors_metadata()) {
      out << "  __metadata__:";
      if (ck.safetensors_metadata()->empty()) out << " {}";
      for (const auto& [k, v] : *ck.safetensors_metadata()) out << " " << printable(k) << "=" << printable(v);
      out << "\n";
    }
  } else {
    out << ", " << (ck.big_endian() ? "big" : "little") << "-endian, pickle protocol " << ck.pickle_protocol() << "\n";
  }
  out << "  " << ck.tensors().size() << " tensors in " << ck.storages().size() << " storages, "
      << human_bytes(doc["storage_bytes"].get<uint64_t>()) << "\n";
  out << "  by dtype: ";
  bool first = true;
  for (const auto& [name, t] : doc["by_dtype"].items()) {
    out << (first ? "" : ", ") << name << " " << t["tensors"] << " (" << human_bytes(t["bytes"].get<uint64_t>()) << ")";
    first = false;
  }
  out << "\n  by device: ";
  first = true;
  for (const auto& [name, t] : doc["by_device"].items()) {
    out << (first ? "" : ", ") << printable(name) << " " << t["storages"] << " storages ("
        << human_bytes(t["bytes"].get<uint64_t>()) << ")";
    first = false;
  }
  out << "\n  state dicts:";
  if (doc["state_dicts"].empty()) out << " none";
  for (const StateDictInfo& sd : ck.state_dicts()) {
    const auto& keys = sd.keys;
    const std::string prefix = shared_wrapper_prefix(keys);
    out << "\n    " << (sd.path.empty() ? "<root>" : printable(path_to_string(sd.path))) << ": " << sd.size << " keys";
    if (sd.sparse_tensors > 0 || sd.extra_states > 0) {
      out << " (";
      if (sd.sparse_tensors > 0) out << sd.sparse_tensors << " sparse tensor" << (sd.sparse_tensors == 1 ? "" : "s");
      if (sd.sparse_tensors > 0 && sd.extra_states > 0) out << ", ";
      if (sd.extra_states > 0) out << sd.extra_states << " module extra state" << (sd.extra_states == 1 ? "" : "s");
      out << ")";
    }
    if (!prefix.empty()) out << ", wrapper prefix '" << printable(prefix) << "'";
    if (sd.in_optimizer) out << " (inside an optimizer state)";
  }
  out << "\n  globals:";
  // A file may name any number of globals: the text lists the first ones, the
  // JSON report every one.
  constexpr size_t kGlobalsShown = 50;
  size_t shown = 0;
  for (const GlobalRef& g : ck.globals()) {
    if (shown++ == kGlobalsShown) {
      out << "\n    ... and " << ck.globals().size() - kGlobalsShown << " more (--json lists them)";
      break;
    }
    out << "\n    " << printable(g.dotted()) << "  (" << global_kind_description(g.kind);
    if (g.kind == GlobalKind::kWeightsOnly && g.allowed_since > TorchVersion{2, 6}) {
      out << " of torch >= " << g.allowed_since.str();
    }
    if (!g.exists_in_torch_1_13) out << "; not in torch 1.13";
    // What loading does with a global ckptfix does not know is what decides a
    // rewrite (a function held as a value is only ever held: a call is refused).
    if (g.kind == GlobalKind::kUnknown) {
      out << "; " << global_use_name(g.use);
      if (g.use != GlobalUse::kReferenced) out << " by " << g.how;
      if (!g.where.empty()) out << " at " << printable(g.where);
    }
    out << ")";
  }
  const WeightsOnlyVerdict verdict = weights_only_verdict(ck, torch);
  out << "\n  default torch.load " << (weights_only_by_default(torch) ? "(weights_only) " : "(weights_only=False) ")
      << "of torch " << torch.str() << ": " << describe(verdict) << "\n";
  out << "  torch releases: " << describe_releases(weights_only_by_release(ck)) << "\n";
  if (!verdict.loads && weights_only_by_default(torch)) {
    out << "  fix: ckptfix weights-only FILE -o OUT rewrites what it refuses into plain data\n";
  }
  // What a plain `convert` would judge: the calls the file, written back, would make.
  if (const std::vector<GlobalRef> refused = unknown_calls(ck, {}).refused; !refused.empty()) {
    out << "  rewriting: refused, the pickle calls";
    for (size_t i = 0; i < refused.size(); ++i) out << (i ? ", '" : " '") << printable(refused[i].dotted()) << "'";
    out << " (not known as data); ckptfix weights-only turns such values into plain data, --allow-global PATTERN "
           "trusts them\n";
  }

  // Nested pickles: one line each, what is inside, and what the policy refuses.
  for (const nlohmann::json& p : doc["nested_pickles"]) {
    if (&p == &doc["nested_pickles"].front()) out << "  nested pickles (unpickled by the model after torch.load):\n";
    out << "    " << std::string(2 * (p["depth"].get<int>() - 1), ' ') << printable(p["key"].get<std::string>()) << ": "
        << p["holder"].get<std::string>() << ", " << p["form"].get<std::string>() << ", " << p["bytes"].get<uint64_t>()
        << " bytes";
    if (!p["globals"].empty()) {
      out << "; globals";
      for (const nlohmann::json& g : p["globals"]) {
        out << (&g == &p["globals"].front() ? " " : ", ") << printable(g["name"].get<std::string>());
      }
    }
    if (!p["tensors"].empty()) out << "; " << p["tensors"].size() << " tensor" << (p["tensors"].size() == 1 ? "" : "s");
    out << "\n";
    for (const nlohmann::json& t : p["tensors"]) out << "      " << printable(t.get<std::string>()) << "\n";
    if (!p["unreadable"].is_null()) out << "      not read: " << printable(p["unreadable"].get<std::string>()) << "\n";
    for (const nlohmann::json& r : p["refused"]) out << "      REFUSED: " << printable(r.get<std::string>()) << "\n";
  }

  // The tensor table, columns sized to their contents (with --stats, the
  // health of each tensor too).
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"path", "dtype", "shape", "stride", "offset", "device", "storage"});
  if (stats != nullptr) {
    for (const char* c : {"nan", "+inf", "-inf", "min", "max", "mean", "absmax"}) rows.back().push_back(c);
  }
  for (const TensorPosition& pos : ck.tensor_positions()) {
    const TensorInfo& t = ck.tensors()[pos.tensor];
    std::string path = pos.path.empty() ? "<root>" : printable(path_to_string(pos.path));
    if (t.parameter) path += " (Parameter)";
    if (t.python_attributes) path += " (with attributes)";
    const bool meta = t.kind == TensorKind::kMeta;
    const StorageInfo* s = meta ? nullptr : &ck.storages()[static_cast<size_t>(t.storage)];
    rows.push_back({path, std::string(dtype_name(t.dtype)), shape_text(t.shape), shape_text(t.stride),
                    std::to_string(t.storage_offset), meta ? "meta" : printable(s->location),
                    meta ? "-" : printable(s->key)});
    if (stats != nullptr) {
      for (const std::string& cell : stats_cells(stats->tensors[pos.tensor])) rows.back().push_back(cell);
    }
  }
  std::vector<size_t> width(rows.front().size(), 0);
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    out << "  ";
    for (size_t i = 0; i < r.size(); ++i) out << std::left << std::setw(static_cast<int>(width[i] + 2)) << r[i];
    out << "\n";
  }
  // Sparse tensors (their parts are in the table above) and extra states.
  for (const auto& sp : doc["sparse_tensors"]) {
    out << "  sparse: " << printable(path_to_string(path_from_json(sp["path"]))) << "  " << sp["layout"].get<std::string>()
        << " " << sp["dtype"].get<std::string>() << " " << shape_text(sp["size"].get<std::vector<int64_t>>())
        << ", nnz " << sp["nnz"] << ", " << printable(sp["device"].get<std::string>()) << "\n";
  }
  for (const auto& x : doc["extra_states"]) {
    out << "  extra state: " << printable(path_to_string(path_from_json(x["path"]))) << "  holds "
        << x["holds"].get<std::string>() << " (carried as data)\n";
  }
  if (stats != nullptr) {
    out << "  statistics: " << human_bytes(stats->bytes) << " of tensors read in " << std::fixed
        << std::setprecision(2) << stats->seconds << " s" << std::defaultfloat << "\n";
  }
}

}  // namespace ckptfix::cli

// salvage_checkpoint and salvage_hint (include/ckptfix/salvage.h): the
// readers run with a SalvageLog, going on past damage and logging what is
// lost (salvage/zip_salvage.cc for torch zips; the legacy, safetensors,
// shard-set and distributed readers each in their own file), and the report
// is made from the log and the checkpoint that remains.
#include "ckptfix/salvage.h"

#include <algorithm>
#include <set>

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "formats/registry.h"
#include "model/checkpoint_impl.h"
#include "model/graph_walk.h"

namespace ckptfix {
namespace {

constexpr const char kNothing[] = "nothing can be recovered: ";

// Optimizer states whose per-parameter state lost tensors (a lost key
// "PATH/state/3/exp_avg" for the optimizer at PATH): named, and unless
// `keep_partial`, their whole `state` dropped, so that resuming restarts
// every parameter's momentum alike instead of some of them silently.
std::vector<PartialOptimizer> handle_partial_optimizers(CheckpointImpl& impl, const SalvageLog& log,
                                                        bool keep_partial) {
  std::vector<PartialOptimizer> out;
  std::vector<std::pair<std::string, Value*>> optimizers;  // path, value
  walk_checkpoint(impl, impl.root, [&](Value& v, const Path& path) {
    if (impl.tensor_of(&v) != nullptr) return false;
    if (is_optimizer_state(v)) optimizers.emplace_back(path.empty() ? "" : path_to_string(path), &v);
    return true;
  });
  for (const auto& [path, optimizer] : optimizers) {
    const std::string state_prefix = (path.empty() ? "" : path + "/") + "state/";
    PartialOptimizer partial;
    partial.path = path.empty() ? "<root>" : path;
    for (const SalvageLog::Lost& l : log.lost) {
      if (l.key.rfind(state_prefix, 0) != 0) continue;
      const std::string rest = l.key.substr(state_prefix.size());
      const std::string parameter = rest.substr(0, rest.find('/'));
      if (std::find(partial.parameters.begin(), partial.parameters.end(), parameter) == partial.parameters.end()) {
        partial.parameters.push_back(parameter);
      }
    }
    if (partial.parameters.empty()) continue;
    if (!keep_partial) {
      for (auto& [k, v] : optimizer->entries()) {
        if (!k->is_str() || k->text != "state") continue;
        walk_checkpoint(impl, v, [&](Value& inner, const Path&) {
          if (impl.tensor_of(&inner) == nullptr) return true;
          ++partial.tensors_dropped;
          return false;
        });
        v = impl.graph.make(ValueKind::kDict);
        partial.state_dropped = true;
      }
    }
    out.push_back(std::move(partial));
  }
  return out;
}

SalvageReport make_report(const Checkpoint& checkpoint, SalvageLog& log) {
  SalvageReport report;
  report.found_by = log.found_by.empty() ? std::string(format_name(checkpoint.format())) : log.found_by;
  report.notes = std::move(log.notes);
  std::set<int32_t> kept_storages;
  for (const TensorPosition& p : checkpoint.tensor_positions()) {
    report.recovered.push_back(p.path.empty() ? "<root>" : path_to_string(p.path));
    const TensorInfo& t = checkpoint.tensors()[p.tensor];
    if (t.storage >= 0 && kept_storages.insert(t.storage).second) {
      report.recovered_bytes += checkpoint.storages()[static_cast<size_t>(t.storage)].nbytes;
    }
  }
  std::set<std::string> lost_storages;
  for (SalvageLog::Lost& l : log.lost) {
    if (lost_storages.insert(l.storage).second) report.lost_bytes += l.bytes;
    report.lost.push_back({std::move(l.key), std::move(l.storage), l.bytes, std::move(l.reason)});
  }
  return report;
}

}  // namespace

Salvaged salvage_checkpoint(const std::filesystem::path& path, const OpenOptions& options) {
  SalvageOptions salvage;
  salvage.open = options;
  return salvage_checkpoint(path, salvage);
}

Salvaged salvage_checkpoint(const std::filesystem::path& path, const SalvageOptions& options) {
  SalvageLog log;
  std::optional<Checkpoint> checkpoint;
  try {
    checkpoint = open_checkpoint(path, options.open, &log);
  } catch (const Error& e) {
    // A damaged file the readers cannot get past: say so plainly.
    if (e.kind() != ErrorKind::kCorrupt || e.message().rfind(kNothing, 0) == 0) throw;
    Error nothing(ErrorKind::kCorrupt, kNothing + e.message());
    nothing.in_file(e.file());
    if (!e.location().empty()) nothing.at(e.location());
    throw nothing;
  }
  std::vector<PartialOptimizer> optimizers = error_boundary(path.string(), [&] {
    return handle_partial_optimizers(impl_of(*checkpoint), log, options.keep_partial_optimizer);
  });
  SalvageReport report = make_report(*checkpoint, log);
  report.optimizers = std::move(optimizers);
  if (report.recovered.empty() && !report.lost.empty()) {
    throw Error(ErrorKind::kCorrupt, std::string(kNothing) + "all " + std::to_string(report.lost.size()) +
                                         " tensors are lost (the first: '" + report.lost.front().key + "', " +
                                         report.lost.front().reason + ")")
        .in_file(path.string());
  }
  return {std::move(*checkpoint), std::move(report)};
}

std::string salvage_hint(const std::filesystem::path& path, const OpenOptions& options) {
  try {
    const Salvaged salvaged = salvage_checkpoint(path, options);
    const size_t recovered = salvaged.report.recovered.size();
    const size_t total = recovered + salvaged.report.lost.size();
    if (salvaged.report.complete()) {
      return "ckptfix salvage can recover all " + std::to_string(total) + " tensors";
    }
    return "ckptfix salvage can recover " + std::to_string(recovered) + " of " + std::to_string(total) + " tensors";
  } catch (...) {
    return {};
  }
}

}  // namespace ckptfix

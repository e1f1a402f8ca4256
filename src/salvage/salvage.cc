// salvage_checkpoint and salvage_hint (include/ckptfix/salvage.h): the
// readers run with a SalvageLog, going on past damage and logging what is
// lost (salvage/zip_salvage.cc for torch zips; the legacy, safetensors,
// shard-set and distributed readers each in their own file), and the report
// is made from the log and the checkpoint that remains.
#include "ckptfix/salvage.h"

#include <set>

#include "ckptfix/error.h"
#include "formats/registry.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {
namespace {

constexpr const char kNothing[] = "nothing can be recovered: ";

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
  SalvageLog log;
  std::optional<Checkpoint> checkpoint;
  try {
    checkpoint = open_checkpoint(path, options, &log);
  } catch (const Error& e) {
    // A damaged file the readers cannot get past: say so plainly.
    if (e.kind() != ErrorKind::kCorrupt || e.message().rfind(kNothing, 0) == 0) throw;
    Error nothing(ErrorKind::kCorrupt, kNothing + e.message());
    nothing.in_file(e.file());
    if (!e.location().empty()) nothing.at(e.location());
    throw nothing;
  }
  SalvageReport report = make_report(*checkpoint, log);
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

// ckptfix salvage IN... (-o OUT | --out-dir DIR) [--require-complete]:
// writes what a damaged checkpoint still holds (salvage.h), reporting every
// tensor lost and why. The input is never changed: there is no --in-place.
#include "ckptfix/error.h"
#include "ckptfix/salvage.h"
#include "cli/commands.h"
#include "cli/report.h"
#include "cli/rewrite.h"

namespace ckptfix::cli {
namespace {

// Lost tensors named in the text report; --json lists them all.
constexpr size_t kLostLinesShown = 20;

nlohmann::json salvage_json(const SalvageReport& r) {
  nlohmann::json lost = nlohmann::json::array();
  for (const LostTensor& l : r.lost) {
    lost.push_back({{"key", l.key}, {"storage", l.storage}, {"bytes", l.bytes}, {"reason", l.reason}});
  }
  return {{"found_by", r.found_by},       {"complete", r.complete()},   {"recovered", r.recovered},
          {"recovered_bytes", r.recovered_bytes}, {"lost", lost}, {"lost_bytes", r.lost_bytes},
          {"notes", r.notes}};
}

// "salvaged 11 of 13 tensors (40.0 MiB, found by the local headers), lost 2 (8.0 MiB)"
std::string summary(const SalvageReport& r) {
  const size_t total = r.recovered.size() + r.lost.size();
  std::string s = "salvaged " + std::to_string(r.recovered.size()) + " of " + std::to_string(total) + " tensors (" +
                  human_bytes(r.recovered_bytes) + ", found by the " + r.found_by + ")";
  if (!r.lost.empty()) s += ", lost " + std::to_string(r.lost.size()) + " (" + human_bytes(r.lost_bytes) + ")";
  return s;
}

}  // namespace

CommandRun register_salvage(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    bool require_complete = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "salvage", "Write what a damaged checkpoint still holds (a cut or damaged file, a shard set or distributed "
                 "checkpoint with missing files): every tensor whose bytes are complete and intact");
  add_rewrite_options(cmd, args->out, false);
  cmd->add_flag("--require-complete", args->require_complete,
                "Fail (exit 1, nothing written) when any tensor is lost: for CI");
  return [args] {
    const bool require_complete = args->require_complete;
    const InputReader read = [require_complete](const std::string& path, const OpenOptions& options, Outcome& o) {
      Salvaged salvaged = salvage_checkpoint(path, options);
      const SalvageReport& r = salvaged.report;
      o.doc["salvage"] = salvage_json(r);
      const std::string who = "ckptfix: " + printable(path) + ": ";
      for (size_t i = 0; i < r.lost.size() && i < kLostLinesShown; ++i) {
        const LostTensor& l = r.lost[i];
        o.err += who + "lost '" + printable(l.key) + "' (" + printable(l.storage) + ", " + human_bytes(l.bytes) +
                 "): " + printable(l.reason) + "\n";
      }
      if (r.lost.size() > kLostLinesShown) {
        o.err += who + "... and " + std::to_string(r.lost.size() - kLostLinesShown) +
                 " more lost tensors (--json lists them all)\n";
      }
      for (const std::string& note : r.notes) o.err += who + "note: " + printable(note) + "\n";
      if (require_complete && !r.complete()) {
        throw Error(ErrorKind::kCorrupt, std::to_string(r.lost.size()) + " of " +
                                             std::to_string(r.lost.size() + r.recovered.size()) +
                                             " tensors are lost, and --require-complete is given: nothing written");
      }
      return ReadInput{std::move(salvaged.checkpoint), {summary(r)}};
    };
    return run_rewrite("salvage", args->out, PassOptions{}, read);
  };
}

}  // namespace ckptfix::cli

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
  nlohmann::json optimizers = nlohmann::json::array();
  for (const PartialOptimizer& p : r.optimizers) {
    optimizers.push_back({{"path", p.path},
                          {"parameters_with_lost_state", p.parameters},
                          {"state_dropped", p.state_dropped},
                          {"tensors_dropped", p.tensors_dropped}});
  }
  return {{"found_by", r.found_by},       {"complete", r.complete()},   {"recovered", r.recovered},
          {"recovered_bytes", r.recovered_bytes}, {"lost", lost}, {"lost_bytes", r.lost_bytes},
          {"partial_optimizers", optimizers}, {"notes", r.notes}};
}

// "salvaged 11 of 13 tensors (40.0 MiB, found by the local headers), lost 2 (8.0 MiB)"
std::string summary(const SalvageReport& r) {
  size_t dropped = 0;
  for (const PartialOptimizer& p : r.optimizers) dropped += p.tensors_dropped;
  const size_t total = r.recovered.size() + r.lost.size() + dropped;
  std::string s = "salvaged " + std::to_string(r.recovered.size()) + " of " + std::to_string(total) + " tensors (" +
                  human_bytes(r.recovered_bytes) + ", found by the " + r.found_by + ")";
  if (!r.lost.empty()) s += ", lost " + std::to_string(r.lost.size()) + " (" + human_bytes(r.lost_bytes) + ")";
  if (dropped > 0) s += ", dropped " + std::to_string(dropped) + " with a partial optimizer state";
  return s;
}

}  // namespace

CommandRun register_salvage(CLI::App& app) {
  struct Args {
    RewriteArgs out;
    bool require_complete = false;
    bool keep_partial_optimizer = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "salvage", "Write what a damaged checkpoint still holds (a cut or damaged file, a shard set or distributed "
                 "checkpoint with missing files): every tensor whose bytes are complete and intact");
  add_rewrite_options(cmd, args->out, false);
  cmd->add_flag("--require-complete", args->require_complete,
                "Fail (exit 1, nothing written) when any tensor is lost: for CI");
  cmd->add_flag("--keep-partial-optimizer", args->keep_partial_optimizer,
                "Keep an optimizer state that lost part of its per-parameter state as it is (incomplete for those "
                "parameters); by default its whole state is dropped, so that every parameter restarts alike");
  return [args] {
    const bool require_complete = args->require_complete;
    const bool keep_partial_optimizer = args->keep_partial_optimizer;
    const InputReader read = [require_complete, keep_partial_optimizer](const std::string& path,
                                                                        const OpenOptions& options, Outcome& o) {
      SalvageOptions salvage;
      salvage.open = options;
      salvage.keep_partial_optimizer = keep_partial_optimizer;
      Salvaged salvaged = salvage_checkpoint(path, salvage);
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
      for (const PartialOptimizer& p : r.optimizers) {
        std::string parameters;
        for (size_t i = 0; i < p.parameters.size() && i < 10; ++i) parameters += (i ? ", " : "") + printable(p.parameters[i]);
        if (p.parameters.size() > 10) parameters += ", ...";
        o.err += who + "optimizer '" + printable(p.path) + "': the state of " + std::to_string(p.parameters.size()) +
                 " parameter" + (p.parameters.size() == 1 ? "" : "s") + " (" + parameters + ") lost tensors; " +
                 (p.state_dropped ? "its whole state was dropped (" + std::to_string(p.tensors_dropped) +
                                        " intact tensors with it), so every parameter restarts its momentum when "
                                        "resumed (--keep-partial-optimizer keeps the rest)"
                                  : "kept as it is (--keep-partial-optimizer): their state is incomplete, so "
                                    "resuming from it restarts or fails for those parameters") +
                 "\n";
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

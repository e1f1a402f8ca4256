// What a rewrite says of an input: its report lines for people, and its
// "changes" object for the JSON report.
#include "cli/rewrite_text.h"

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ckptfix/error.h"
#include "cli/report.h"

namespace ckptfix::cli {

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
    if (f.left_out > f.kept) {  // said first, where it cannot be missed
      lines.insert(lines.begin(), "the fit keeps " + std::to_string(f.kept) + " of the file's " +
                                      std::to_string(f.kept + f.left_out) + " tensors and leaves out " +
                                      std::to_string(f.left_out) + " (see 'left out' below)");
    }
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

namespace {

// Beyond this many keys moved, made or left out, the text report says them
// by rule, a few each (--json lists every one).
constexpr size_t kFitKeyLines = 200;

}  // namespace

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

namespace {

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
          {"kept", f.kept},           {"left_out", f.left_out}, {"tensors_cast", f.tensors_cast},
          {"left_out_of_file", f.left_out_of_file}, {"changed", f.changed}};
}

}  // namespace

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

}  // namespace ckptfix::cli

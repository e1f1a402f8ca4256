// The --rename rules that pair what a fit leaves over (issue 67): keys of
// the file the model lacks and keys of the model the file lacks, matched
// module by module where their parameters have the same names and shapes,
// one to one, so that advice keeps the weights instead of dropping them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ckptfix/fit.h"
#include "passes/fit_plan.h"

namespace ckptfix {

struct RenameAdvice {
  /// (regex, replacement) in --rename's syntax, as few as express the
  /// pairing: one per first-segment change ("^q\\." -> "query."), else one
  /// per module.
  std::vector<std::pair<std::string, std::string>> renames;
  /// Inputs and reference entries the renames pair.
  size_t inputs_paired = 0;
  size_t entries_paired = 0;
};

/// The renames that pair `plan`'s unexpected inputs with its missing
/// reference entries; empty when none pair one to one.
RenameAdvice advise_renames(const std::vector<FitInput>& inputs, const ModelReference& model, const FitPlan& plan);

}  // namespace ckptfix

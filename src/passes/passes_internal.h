// The individual passes, run in order by apply_passes (pipeline.cc).
#pragma once

#include <vector>

#include "ckptfix/passes.h"
#include "model/dict_selection.h"

namespace ckptfix {

/// Rewrites what torch's default weights_only load refuses (weights_only.cc).
void make_weights_only(Checkpoint& checkpoint, const PassOptions& options, PassReport& report);

/// Retags the locations of the given storages (--to, or --map entries).
void remap_devices(Checkpoint& checkpoint, const std::vector<size_t>& storages, const PassOptions& options,
                   PassReport& report);

/// Makes the chosen state dict a plain-dict root on the CPU (libtorch.cc).
void make_libtorch_state_dict(Checkpoint& checkpoint, const PassOptions& options, PassReport& report);

/// Fits the state dict to options.like (fit_pass.cc): it becomes the root.
void fit_state_dict(Checkpoint& checkpoint, const PassOptions& options, PassReport& report);

/// Marks storages for conversion; see cast.cc for the sharing rule.
void plan_cast(Checkpoint& checkpoint, const std::vector<TargetTensor>& targets, const PassOptions& options,
               PassReport& report);

}  // namespace ckptfix

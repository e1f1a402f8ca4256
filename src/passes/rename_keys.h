// Key renames in one dict and its `_metadata`, as torch does them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ckptfix/passes.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

/// The entries of the `_metadata` an OrderedDict state dict carries (the
/// module versions torch.save keeps), or nullptr when it has none.
std::vector<std::pair<Value*, Value*>>* metadata_of(Value& dict);

/// Removes `prefix` from every key that starts with it, like torch's
/// consume_prefix_in_state_dict_if_present: renamed entries move to the end
/// (pop + insert), `_metadata` keys equal to the prefix without its dot
/// become '' and keys starting with the prefix lose it ('' is left alone).
/// Throws Error(kConflict) naming both keys if two would become equal.
void strip_prefix(ValueGraph& graph, Value& dict, const Path& path, const std::string& prefix, PassReport& report);

/// Adds `prefix` to every key that does not start with it yet, in place, and
/// to `_metadata` as nn.DataParallel(model).state_dict() has it: the old ''
/// entry becomes the wrapped module's and a new '' entry ({'version': 1})
/// for the wrapper is put first. A second run changes nothing.
void add_prefix(ValueGraph& graph, Value& dict, const Path& path, const std::string& prefix, PassReport& report);

}  // namespace ckptfix

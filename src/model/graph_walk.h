// Walking the value graph from the root in pickle order, with paths.
//
// Paths name how a value is reached: dict keys (and OrderedDict keys) as
// strings (int keys as integers, other keys by their repr), list and tuple
// positions as integers, and for other objects their constructor arguments
// by position and their state (attributes, e.g. an argparse.Namespace's) by
// name. An OrderedDict's `_metadata` is not part of any path.
#pragma once

#include <functional>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// True for a plain dict or a collections.OrderedDict object.
bool is_dict_like(const Value& v);

/// True for an optimizer state: a dict-like with keys 'state' and 'param_groups'.
bool is_optimizer_state(const Value& v);

/// Renders a dict key for a path (str as is, int as integer, others as repr).
PathElement key_to_path_element(const Value& key);

/// Visits values depth first. `visit(value, path)` returns true to descend
/// into the value's children. Values already on the current path (cycles)
/// are not revisited.
void walk_graph(Value* root, const std::function<bool(Value&, const Path&)>& visit);

}  // namespace ckptfix

// Walking the value graph from the root in pickle order, with paths.
//
// Paths name how a value is reached: dict keys (and OrderedDict keys) as
// strings (int keys as integers, other keys by their repr), list and tuple
// positions as integers, and for other objects their constructor arguments
// by position and their state (attributes, e.g. an argparse.Namespace's) by
// name. An OrderedDict's `_metadata` is not part of any path.
//
// The walk is iterative (a file decides how deep the graph is, not the
// stack) and bounded: deeper than max_depth, or longer than max_steps, it
// fails with Error(kLimit). A value shared by several paths is visited once
// per path, as each path is a position (tied weights are under both keys);
// the step limit is what keeps a pickle whose memo shares a list 64 levels
// deep, two ways at each (2^64 paths in 1 KB), from taking forever, and
// from taking all memory: a visit costs one step, plus one per element of
// its path and per 16 bytes of the path's text, plus one per child of the
// value. That is what a visitor may keep of a visit (tensor_positions keeps
// the path, state_dicts the keys), so what any walk keeps is bounded by the
// step limit (ReadLimits::max_walk_steps), whatever the number of paths.
#pragma once

#include <functional>

#include "ckptfix/checkpoint.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

/// True for a plain dict or a collections.OrderedDict object.
bool is_dict_like(const Value& v);

/// True for an optimizer state: a dict-like with keys 'state' and 'param_groups'.
bool is_optimizer_state(const Value& v);

/// Renders a dict key for a path (str as is, int as integer, others as repr).
PathElement key_to_path_element(const Value& key);

/// How far one walk may go (see the top of this file).
struct WalkLimits {
  uint64_t max_depth = 1000;  ///< ReadLimits::max_depth
  uint64_t max_steps = 0;     ///< ReadLimits::max_walk_steps, resolved; 0: no limit
};

/// The limits for walking `checkpoint`'s graph, from the limits it was opened with.
WalkLimits walk_limits(const CheckpointImpl& checkpoint);

/// Visits values depth first. `visit(value, path)` returns true to descend
/// into the value's children. Values already on the current path (cycles)
/// are not revisited. Throws Error(kLimit) beyond `limits`.
void walk_graph(Value* root, const std::function<bool(Value&, const Path&)>& visit, const WalkLimits& limits);

/// Where the object pickle of `checkpoint` is, for messages about its graph
/// ("archive/data.pkl", or "legacy object pickle").
std::string object_pickle_name(const CheckpointImpl& checkpoint);

/// walk_graph from `root` (a value of `checkpoint`'s graph) with the
/// checkpoint's limits; errors name the object pickle as their place.
void walk_checkpoint(const CheckpointImpl& checkpoint, Value* root, const std::function<bool(Value&, const Path&)>& visit);

}  // namespace ckptfix

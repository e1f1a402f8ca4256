// Str and bytes payloads the reader left in the input file
// (OpenOptions::leave_payloads_in_file, Value::in_file): reading them in
// where something needs their text.
//
// Only the weights-only repair uses such a payload where it lies (a numpy
// array's bytes become a storage whose source is that range of the file).
// Everything else in ckptfix reads `Value::text`, so apply_passes reads in
// every payload still in the graph before any other pass, and after the
// repair every one it left.
#pragma once

#include <unordered_set>

#include "model/checkpoint_impl.h"

namespace ckptfix {

/// Calls f(child) for every child of `v` (null ones included): those the
/// pickler writes, dict keys, callables and persistent ids too.
template <typename F>
void for_each_child(const Value& v, F&& f) {
  for (Value* item : v.items) f(item);
  if (!v.has_parts()) return;
  for (const auto& [key, value] : v.entries()) {
    f(key);
    f(value);
  }
  for (Value* state : v.states()) f(state);
  f(v.callable());
  f(v.args());
  f(v.kwargs());
  f(v.pid());
}

/// Reads `v`'s payload from the input file into `v.text`; a value whose
/// payload is not in the file is left as it is. What is read in counts
/// against ReadLimits::max_pickle_bytes, with the rest of the pickle held in
/// memory (CheckpointImpl::pickle_bytes_held): beyond it, Error(kLimit).
void read_in_payload(CheckpointImpl& checkpoint, Value& v);

/// read_in_payload for every value reachable from the root, except those in
/// `keep`. Memory then grows with the payloads read in.
void read_in_payloads(CheckpointImpl& checkpoint, const std::unordered_set<const Value*>& keep = {});

/// For the library's entry points that take a const Checkpoint (save,
/// save_safetensors, diff_checkpoints, select_state_dict): reads in every
/// payload still in the file, so that one opened with leave_payloads_in_file
/// but never given to apply_passes is written and compared with its real
/// text, not "". A cache fill: the values stay what they were, only their
/// text moves into memory (so the first such call on a checkpoint must not
/// race another on the same one). Errors name the input file.
void read_in_left_payloads(const Checkpoint& checkpoint);

}  // namespace ckptfix

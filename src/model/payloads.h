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

/// Reads `v`'s payload from the input file into `v.text`; a value whose
/// payload is not in the file is left as it is.
void read_in_payload(const CheckpointImpl& checkpoint, Value& v);

/// read_in_payload for every value reachable from the root, except those in
/// `keep`. Memory then grows with the payloads read in.
void read_in_payloads(CheckpointImpl& checkpoint, const std::unordered_set<const Value*>& keep = {});

}  // namespace ckptfix

// What torch.distributed.checkpoint.save makes of a state dict before it
// writes anything: the items (docs/dcp-format-notes.md (c)). DCP flattens
// the dict with flatten_state_dict (torch/distributed/checkpoint/
// _traverse.py, traverse_state_dict): mappings are descended with str(key),
// a list only when it holds a tensor, a mapping or such a list (else it is
// one value), every other value is a leaf; the key of a leaf is its path
// joined with '.'. A tensor is one item of one chunk (the whole tensor); any
// other leaf is a bytes item, torch.save of the value.
#pragma once

#include <string>
#include <vector>

#include "formats/dcp_metadata.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

struct DcpItem {
  std::string fqn;                ///< the path joined with '.'
  std::vector<DcpPathStep> path;  ///< what .metadata's planner_data records
  Value* value = nullptr;         ///< the leaf
  const Tensor* tensor = nullptr; ///< a dense tensor: a tensor item; else a bytes item
};

/// The items of `impl`'s root, in the order DCP puts them in .metadata.
/// Throws Error(kInvalidArgument) when the root is not a dict, and
/// Error(kUnsupported) for what DCP cannot hold or ckptfix does not write
/// (two leaves flattening to one key, a key that is neither str nor int nor
/// bool, a tensor with no data of its own: meta or quantized), naming the key.
std::vector<DcpItem> plan_dcp_items(const CheckpointImpl& impl);

}  // namespace ckptfix

// What a state dict may hold: what nn.Module.load_state_dict takes.
//
// A state dict maps str keys to tensors: plain tensors, Parameters,
// tensors with Python attributes (torch 2.x pickles those through
// torch._tensor._rebuild_from_type_v2, which the tensor table models) and
// sparse tensors (torch._utils._rebuild_sparse_tensor over their index and
// value tensors). Under a key whose last segment is `_extra_state` it may
// hold anything picklable: a module's get_extra_state() (TransformerEngine,
// torchao and NeMo layers keep one each), which load_state_dict hands to
// set_extra_state as it is. Every rule that decides "is this a state dict"
// (graph_walk.cc's state_dicts, select_state_dict, the passes) asks here.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckptfix/state_dict.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

/// Whether `key` names a module's extra state: "_extra_state", or a key
/// whose last '.'-segment is `_extra_state` ("0.attn._extra_state").
bool is_extra_state_key(std::string_view key);

/// The sparse tensor `v` rebuilds (_rebuild_sparse_tensor, or torch 1.x's
/// _rebuild_sparse_csr_tensor), or nullopt when `v` is not one whose layout,
/// parts and size ckptfix understands.
std::optional<SparseTensorInfo> parse_sparse_tensor(const CheckpointImpl& checkpoint, const Value& v);

/// What an entry of a dict is, as load_state_dict sees it.
enum class EntryKind {
  kTensor,      ///< a tensor (dense or quantized, a Parameter, with Python attributes or not)
  kSparse,      ///< a sparse tensor
  kExtraState,  ///< any value under an `_extra_state` key that is not a tensor
  kOther,       ///< none of these: the dict is no state dict
};
EntryKind entry_kind(const CheckpointImpl& checkpoint, const Value& key, const Value& value);

/// Why the dict-like `dict` is not a state dict ("its entry 'epoch' is an
/// int, not a tensor"), or nullopt when it is one: not empty, every key a
/// str, every value a tensor, a sparse tensor or an extra state, at least
/// one of them a tensor.
std::optional<std::string> state_dict_problem(const CheckpointImpl& checkpoint, const Value& dict);

/// A dict of tensors that is no state dict, and why.
struct NotAStateDict {
  const Value* dict = nullptr;
  std::string path;     ///< '/'-separated, "" for the root
  std::string problem;  ///< state_dict_problem's words
  /// "; the dict 'x' holds tensors but is not one: its entry 'epoch' is an
  /// int, not a tensor", to end a message with.
  std::string reason() const;
};

/// The dicts outside optimizer states that hold a tensor under a str key but
/// are no state dicts (paths the passes' keys may still name), in walk
/// order, for saying why a checkpoint has no state dict.
std::vector<NotAStateDict> dicts_of_tensors_not_state_dicts(const CheckpointImpl& checkpoint);

/// "an int", "a str", "a dict", "an 'argparse.Namespace' object", ... for messages.
std::string describe_value(const Value& v);

}  // namespace ckptfix

// The rewrite rules of the weights-only repair (weights_only.cc): each
// recognises values of some classes outside torch's weights_only allowlist
// and rewrites one in place into the allowed value it stands for.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ckptfix/passes.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

/// What the rules work on and where they report.
struct RepairContext {
  CheckpointImpl& impl;
  std::vector<ValueChange>& changes;
  /// numpy dtypes already rewritten to their names, with what they were
  /// ("<f8"): arrays and scalars met later still need their type.
  std::unordered_map<const Value*, std::string> numpy_dtypes;
  /// The torch release the output is for: a numpy array of an unsigned
  /// type it lacks (uint16, uint32 before 2.3) becomes a tensor of the next
  /// wider signed type, which holds every value.
  TorchVersion torch = default_torch_version();
};

/// Tries every rule on `v` (found at `path`); true when one rewrote it.
bool repair_value(RepairContext& ctx, Value& v, const Path& path);

/// argparse.Namespace, types.SimpleNamespace -> dict; pathlib paths -> str;
/// a function held as a value (GlobalKind::kFunction) -> its dotted name;
/// functools.partial -> {'func': name, 'args': [...], 'keywords': {...}};
/// a builtin exception -> "ValueError: its message" (weights_only_python.cc).
bool repair_python_value(RepairContext& ctx, Value& v, const Path& path);

/// numpy scalars -> bool/int/float/complex, numpy.dtype -> its name, numpy
/// arrays of numeric and bool types -> tensors (weights_only_numpy.cc).
bool repair_numpy_value(RepairContext& ctx, Value& v, const Path& path);

/// The values holding the bytes of numpy arrays (the str of
/// _codecs.encode(str, 'latin1'), or the bytes): their payloads may stay in
/// the input file (model/payloads.h), since the numpy rule reads them from
/// there. Only those nothing but their array reaches: any other rule would
/// read such a payload's text as "".
std::unordered_set<const Value*> numpy_array_payloads(CheckpointImpl& impl);

/// A pickled torch.nn.Module (any class whose state has _parameters,
/// _buffers and _modules) -> its state_dict() (weights_only_module.cc).
bool repair_module(RepairContext& ctx, Value& v, const Path& path);

/// omegaconf DictConfig / ListConfig -> dict / list, as
/// OmegaConf.to_container(cfg, resolve=False) (weights_only_omegaconf.cc).
bool repair_omegaconf(RepairContext& ctx, Value& v, const Path& path);

/// REDUCE(cls, (value,)) with no state, how an enum.Enum member pickles ->
/// the value (weights_only_python.cc). Tried last.
bool repair_enum_member(RepairContext& ctx, Value& v, const Path& path);

/// NEWOBJ(cls) + BUILD(its __dict__ or (dict, slots)), how an instance of
/// a class of its own pickles (a dataclass: TrainingArguments) -> the dict
/// of its attributes (weights_only_python.cc). Tried after every other.
bool repair_plain_object(RepairContext& ctx, Value& v, const Path& path);

/// Turns `v` into a str holding `text` (the rules' common result).
inline void become_str(Value& v, std::string text) {
  v.reset(ValueKind::kStr);
  v.text = std::move(text);
}

}  // namespace ckptfix

// Picking the state dict a loader wants out of a checkpoint: the root when
// it is one, the only one there is, or the one at a given path.
//
// A state dict is what nn.Module.load_state_dict takes: str keys mapped to
// tensors (Parameters and tensors with Python attributes included), sparse
// tensors, and, under a module's `_extra_state` key, any value
// (get_extra_state()'s), carried as plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// A sparse tensor: torch rebuilds it from dense tensors of the checkpoint.
struct SparseTensorInfo {
  /// torch's layout name: "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr" or "sparse_bsc".
  std::string layout;
  /// The tensors it is made of (indexes into Checkpoint::tensors()), in
  /// torch's order: indices and values for sparse_coo; compressed indices,
  /// plain indices and values for the others.
  std::vector<size_t> parts;
  /// Its size (torch.Size).
  std::vector<int64_t> size;
  /// sparse_coo: whether it was saved coalesced (nullopt: the file does not say).
  std::optional<bool> coalesced;
};

/// One entry of a state dict: its key and what it holds.
struct StateDictEntry {
  /// What an entry holds.
  enum class Kind {
    kTensor,        ///< a tensor: `tensor`
    kSparseTensor,  ///< a sparse tensor: `sparse`
    kData,          ///< a module's extra state that is not a tensor: read it with plain_value()
  };
  std::string key;     ///< the key, as the file spells it
  Kind kind = Kind::kTensor;  ///< what it holds
  size_t tensor = 0;   ///< kTensor: index into Checkpoint::tensors()
  SparseTensorInfo sparse;    ///< kSparseTensor: the sparse tensor
  /// kData: what it holds, in words ("a dict", "a bytes", "an 'io.BytesIO' object").
  std::string holds;
};

/// The entries, in the file's order, of the state dict at `key` (a
/// '/'-separated path such as "state_dict" or "model/ema"), or, when `key` is
/// empty, of the root if it is a state dict, else of the only state dict
/// outside optimizer states. Throws Error(kInvalidArgument) when `key`
/// names nothing or something that is not a dict, Error(kConflict) when
/// there is no state dict, several (naming them), or the dict at `key` is
/// not a state dict (saying why).
std::vector<StateDictEntry> select_state_dict(const Checkpoint& checkpoint, const std::string& key = {});

/// A value made of plain data, as a tree: what pickle's data opcodes build
/// (and torch's weights_only loader accepts), never anything that runs.
struct PlainValue {
  /// What the value is.
  enum class Kind {
    kNone, kBool, kInt, kFloat, kStr, kBytes, kList, kTuple, kDict, kOrderedDict, kSet, kFrozenSet,
    kTensor,  ///< a tensor of the checkpoint: `tensor`
    /// An io.BytesIO (Transformer Engine's older extra state): its buffer in
    /// `text`, its position in `integer` (decimal).
    kBytesIO,
  };
  Kind kind = Kind::kNone;  ///< what it is
  bool boolean = false;     ///< kBool
  /// kInt: its value in decimal (Python's ints have no size limit).
  std::string integer;
  double number = 0;        ///< kFloat
  std::string text;         ///< kStr (UTF-8), kBytes and kBytesIO
  /// kList, kTuple, kSet, kFrozenSet: the items; kDict, kOrderedDict: keys
  /// and values alternating, in order.
  std::vector<PlainValue> items;
  size_t tensor = 0;        ///< kTensor: index into Checkpoint::tensors()
};

/// The value of `entry`, one of select_state_dict(checkpoint, key)'s, as
/// plain data (a kTensor entry is its tensor). Throws Error(kUnsupported)
/// naming the key and the class when it holds anything else (an object of
/// a class, a function), Error(kLimit) when it is nested more deeply than
/// the checkpoint's ReadLimits::max_depth or holds itself.
PlainValue plain_value(const Checkpoint& checkpoint, const std::string& key, const StateDictEntry& entry);

/// The Python attributes of tensor `tensor` (TensorInfo::python_attributes):
/// a kDict of name and value; an empty kDict for a tensor without any.
/// Throws as plain_value() does.
PlainValue tensor_attributes(const Checkpoint& checkpoint, size_t tensor);

}  // namespace ckptfix

// Where each key of a state dict goes in a model (fit.h): the rules of
// `fix --like`, on keys and shapes alone (no graph, no file), in order:
//
//   0. --drop GLOB leaves keys out; --rename REGEX=REPL renames, in order;
//   1. a key the model has stays;
//   2. wrapper segments (module., _orig_mod., _fsdp_wrapped_module.,
//      _fpw_module., _checkpoint_wrapped_module.) the model has nowhere are
//      removed wherever they stand;
//   3. one prefix stripped and/or one added on dot boundaries: the one that
//      makes the most keys match by name and shape (by a shared tail of two
//      segments or more, or by a module holding the same names and shapes
//      as a model module), with support: two keys at least, no tie (a tie
//      is ambiguous), and, for a prefix stripped, every key under it a
//      model key by name after the change (else ambiguous, naming the key);
//      a prefix only added moves only the keys it makes fit;
//   4. known renames, only where the model has the target and not the
//      source: a last segment gamma/beta -> weight/bias into a module the
//      model's shapes show to be a norm (a 1-d weight, every other tensor
//      of the module 1-d of its length); weight_norm's weight_g/weight_v <->
//      parametrizations.weight.original0/original1; a digit segment joined
//      or split (norm.1 <-> norm1); a BatchNorm's num_batches_tracked made
//      (int64 0, as torch makes it for old BatchNorm) where the model has it
//      and the file's running_mean is there, and left out where the model
//      has it not.
//
// A key that two model keys of its shape could take is not placed: that is
// an ambiguity, refused naming the key and every candidate; renames are
// one-to-one. What is left (missing, unexpected, size mismatches) is said
// in torch's words by refusal_lines.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ckptfix/fit.h"

namespace ckptfix {

/// One entry of the state dict being fitted.
struct FitInput {
  std::string key;
  bool tensor = true;  ///< false: a module's extra state (data)
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
};

struct FitPlan {
  /// Per input: its key in the output ("" when left out), the rules that
  /// moved it ("" when kept as it is), the reference entry it fills (-1:
  /// none), and why it was left out ("" when it was not).
  std::vector<std::string> names, rules;
  /// Per input: whether a rule moved it to another module (a prefix, a
  /// wrapper segment, a digit segment, --rename), so that `_metadata`,
  /// which is by module, moves along; gamma -> weight moves no module.
  std::vector<bool> module_moved;
  std::vector<int64_t> placed;
  std::vector<std::string> dropped_by;
  /// Per reference entry: the input that fills it (-1: none), and whether
  /// the fit makes it (a BatchNorm's num_batches_tracked).
  std::vector<int64_t> source;
  std::vector<bool> made;
  /// Inputs the model has no key for, and inputs placed on a key of
  /// another shape (not counted as placed: left out with drop_mismatched).
  std::vector<size_t> unexpected, mismatched;
  /// Reference entries nothing fills.
  std::vector<size_t> missing;
  /// Ambiguities and collisions, each a message.
  std::vector<std::string> ambiguous;
  /// Reference entries filled by an input of their shape (how well it fits).
  size_t fitted = 0;
  /// Whether nothing stands in the way of the output (every refusal allowed).
  bool acceptable(const FitOptions& options) const;
};

/// Plans the fit of `inputs` to `model`. With `rules` false, only keys the
/// model has as they are are placed (what load_state_dict does itself).
/// Throws Error(kInvalidArgument) for a --rename pattern or replacement
/// that does not compile.
FitPlan plan_fit(const std::vector<FitInput>& inputs, const ModelReference& model, const FitOptions& options,
                 bool rules = true);

/// A shape as torch prints it: "torch.Size([7, 4])".
std::string torch_size_text(const std::vector<int64_t>& shape);

/// What stands in the way, one line each, in torch's words where torch has
/// them (Missing, Unexpected, each size mismatch), each with its way out
/// named by option (`allow_missing`, ...); the ambiguities first.
std::vector<std::string> refusal_lines(const FitPlan& plan, const std::vector<FitInput>& inputs,
                                       const ModelReference& model, const FitOptions& options);

/// Two module prefixes with the last segments they share dropped: what a
/// rename changed. ("model.fc.", "fc.") is ("model.", "").
std::pair<std::string, std::string> without_shared_tail(std::string strip, std::string add);

}  // namespace ckptfix

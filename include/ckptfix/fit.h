// Fitting a state dict to the model it goes into (issue 51).
//
// `model.load_state_dict(sd, strict=True)` refuses a state dict whose keys
// or shapes are not the model's: "Missing key(s) in state_dict", "Unexpected
// key(s) in state_dict", "size mismatch for ...". Given what the model
// expects (a ModelReference: every key of its state dict in order, with its
// shape and dtype), the fit pass of apply_passes (PassOptions::like) renames
// the keys by rules that never guess (see FitOptions and docs/cli.md, "fix
// --like"), and writes the state dict load_state_dict(strict=True) takes, in
// the model's order; what no rule places is refused in torch's own words.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/dtype.h"
#include "ckptfix/torch_version.h"

namespace ckptfix {

/// One entry of a model's state dict, as load_state_dict expects it.
struct ExpectedEntry {
  std::string key;
  /// False for a module's extra state (a key ending in `_extra_state`):
  /// any value, no shape.
  bool tensor = true;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
};

/// What a model's load_state_dict expects: its state dict's entries in order.
struct ModelReference {
  std::string name;  ///< for messages: the file it came from, or "the model"
  std::vector<ExpectedEntry> entries;
};

/// The reference `path` describes: a checkpoint ckptfix reads, its state
/// dict at `key` or chosen as select_state_dict chooses (a meta-device
/// state dict, torch.save(model.to("meta").state_dict()), is the smallest),
/// or a JSON document (a file whose first non-blank byte is `{`) mapping
/// each key, in the model's order, to {"shape": [3, 4], "dtype": "float32"}
/// ({} for an extra state).
/// Throws Error naming the file.
ModelReference read_model_reference(const std::filesystem::path& path, const std::string& key = {},
                                    const OpenOptions& options = {});

/// The reference a JSON document describes (see read_model_reference);
/// `name` names it in messages. Throws Error(kInvalidArgument) saying what
/// is wrong and where.
ModelReference model_reference_from_json(std::string_view json, const std::string& name);

/// What the fit may do besides its rules, and what it may leave undone.
struct FitOptions {
  /// (regex, replacement) pairs, applied to every key first and in order,
  /// each as Python's re.sub (the syntax: src/passes/key_regex.h).
  std::vector<std::pair<std::string, std::string>> renames;
  /// Keys to leave out (fnmatch globs on the keys as the file has them).
  std::vector<std::string> drops;
  /// Write what fits even where the model has keys the file lacks (for
  /// load_state_dict(strict=False)); else they are refused.
  bool allow_missing = false;
  /// Leave out the keys the model does not have; else they are refused.
  bool drop_unexpected = false;
  /// Leave out the keys whose shape is not the model's (they are then
  /// missing, and allowed to be); else they are refused.
  bool drop_mismatched = false;
  /// Cast each floating tensor to the dtype the model has for it.
  bool dtype_like = false;
};

/// A key the fit moved, added or dropped, and the rule that did it.
struct KeyMove {
  std::string from;  ///< the key in the input ("" for an added one)
  std::string to;    ///< the key in the output ("" for a dropped one)
  std::string rule;  ///< "wrapper segment '_orig_mod.'", "prefix 'model.' removed", "--rename ...", ...
};

/// What the fit did.
struct FitReport {
  std::string reference;            ///< ModelReference::name
  Path state_dict;                  ///< the dict fitted, from the root
  std::vector<KeyMove> moved;       ///< keys renamed, from -> to
  std::vector<KeyMove> added;       ///< keys made (num_batches_tracked)
  std::vector<KeyMove> dropped;     ///< keys left out
  std::vector<std::string> missing; ///< model keys the output lacks (allowed: allow_missing, drop_mismatched)
  /// The file's tensors written (renamed or not; `moved` lists the renamed
  /// ones), and those left out (`dropped`): a fit keeps at least one, and
  /// says so where it leaves out more than it keeps (issue 67).
  uint64_t kept = 0;
  uint64_t left_out = 0;
  uint64_t tensors_cast = 0;        ///< with dtype_like
  /// The file's other top-level entries, not written (the output is the
  /// fitted state dict alone: a Lightning file's 'epoch', 'optimizer_states').
  std::vector<std::string> left_out_of_file;
  /// Whether the output differs from the input at all (a key moved, added
  /// or dropped, another order, the state dict made the root, a cast).
  bool changed = false;
};

/// What load_state_dict(strict=True) of the model would say of a state
/// dict as it is: torch's own lines, in its order (Missing, Unexpected,
/// then each size mismatch), each as torch words it; empty when it loads.
struct LoadVerdict {
  std::vector<std::string> lines;
  /// The state dict judged, from the root.
  Path state_dict;
  /// When it does not load: whether the fit (fix --like) makes it load, and
  /// what it must then be allowed (FitOptions with allow_missing,
  /// drop_unexpected, drop_mismatched set as needed); nullopt when it
  /// cannot (an ambiguity only `renames` or `drops` resolve).
  std::optional<FitOptions> fix;
  /// With `fix`: how many of the state dict's tensors that fix keeps, of
  /// how many. Where keys the file has under other names pair one to one
  /// with the model's (same parameter names and shapes, module by module),
  /// `fix->renames` holds the --rename rules that map them, so that the
  /// advice keeps the weights rather than dropping them (issue 67).
  uint64_t fix_keeps = 0;
  uint64_t tensors = 0;
  bool loads() const { return lines.empty(); }
};

/// The verdict for the state dict of `checkpoint` at `key` (else the root
/// when it is one, the only one, or of several the one whose keys match the
/// model's best; several as good are refused, Error(kConflict), naming them). Follows torch: a BatchNorm's
/// num_batches_tracked is not missing where the file's _metadata says the
/// module was saved before version 2 (or says nothing), and a 1-d tensor
/// of at least one element fits a 0-dim parameter (torch takes its first).
/// `torch`: the release whose load_state_dict speaks (1.13 and 2.x differ
/// on which keys are unexpected; default: the newest ckptfix models).
LoadVerdict load_verdict(const Checkpoint& checkpoint, const ModelReference& model, const std::string& key = {},
                         TorchVersion torch = default_torch_version());

}  // namespace ckptfix

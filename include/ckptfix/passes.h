// Rewrite passes: edits of a Checkpoint that the writer then serializes.
//
// Passes never touch files. They rename state-dict keys (and their
// `_metadata`), retag storage locations, and mark storages for dtype
// conversion; the writer applies the conversion while streaming the bytes.
//
// `apply_passes` runs the requested passes in this order, so each sees the
// result of the one before:
//   0. extract          (the value at a path becomes the root; --key paths are then below it)
//   1. strip prefixes   (explicit --prefix values first, then --auto)
//   2. add a prefix
//   3. remap devices
//   4. cast dtypes       (--keep globs match the keys as renamed by 1 and 2)
//   5. for LibTorch      (the chosen state dict becomes a plain dict root, on the CPU)
// Renaming first means `fix --auto-prefix --add-prefix P` re-wraps cleanly,
// and that globs are written against the names the output will have.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/fit.h"
#include "ckptfix/torch_version.h"

namespace ckptfix {

/// What to do. Empty or unset fields mean "not this pass".
struct PassOptions {
  /// Keep only the value at this '/'-separated path (e.g. "state_dict"),
  /// which becomes the root; storages nothing uses any more are dropped.
  std::optional<std::string> extract;

  /// Dicts to edit, as '/'-separated paths from the root ("state_dict",
  /// "model/ema"); empty: every state dict outside optimizer states.
  std::vector<std::string> keys;

  /// Prefixes to remove from the keys that start with them, in order.
  std::vector<std::string> strip_prefixes;
  /// Remove every known wrapper prefix all keys of a dict share, repeatedly.
  bool auto_strip = false;
  /// Prefix to add to every key that does not start with it yet.
  std::string add_prefix;

  /// Retag every storage's saved location to this device.
  std::optional<std::string> to_device;
  /// Retag exactly matching locations (like a dict map_location).
  std::vector<std::pair<std::string, std::string>> device_map;

  /// The torch release the output is for (torch_version.h): what a cast
  /// gives where releases differ (float8_e4m3fn overflow: saturated since
  /// 2.13, NaN before), what weights_only keeps (that release's allowlist),
  /// and the dtypes the output may hold (a tensor of a dtype that release
  /// cannot load fails the input, Error kUnsupported naming the key, the
  /// dtype and the release). nullopt: the newest release ckptfix models,
  /// and no dtype is refused (the output holds what the input held).
  std::optional<TorchVersion> torch;

  /// Convert floating tensors to this type.
  std::optional<DType> cast_to;
  /// Only tensors of these types are converted; empty: every castable float type.
  std::vector<DType> cast_from;
  /// Keys (fnmatch globs, e.g. "*running_var") whose tensors keep their type.
  std::vector<std::string> keep;

  /// Rewrite every value torch's default load (weights_only=True) refuses
  /// into the plain data it stands for: namespaces -> dicts, numpy scalars,
  /// dtypes and arrays -> Python numbers, names and tensors, paths -> str,
  /// pickled nn.Modules -> their state_dict() (docs/cli.md, "weights-only").
  /// Runs first, so the other passes see the result. A value of any other
  /// class outside torch's allowlist fails the input (Error kUnsupported,
  /// naming every such class) unless `drop_unknown`.
  bool weights_only = false;
  /// With weights_only: replace the values no rule knows with None (reported).
  bool drop_unknown = false;

  /// Fit the state dict to this model (fit.h): the state dict (the one at
  /// `keys`, or the one that fits the model best; several equally good are
  /// refused, naming them) becomes the root, its keys renamed by the fit's
  /// rules, in the model's order, with `_metadata` renamed along; what no
  /// rule places is refused in torch's words unless `fit` allows it. Runs
  /// in place of the prefix passes (it chooses prefixes itself), which may
  /// not be given with it, nor `extract`.
  std::shared_ptr<const ModelReference> like;
  /// What the fit may do besides its rules (fit.h).
  FitOptions fit;

  /// Make the file readable by LibTorch's torch::jit::pickle_load: the state
  /// dict (the root, the only one, or the single --key) becomes the root as
  /// a plain dict (no OrderedDict, no _metadata, Parameters unwrapped), and
  /// every storage is retagged "cpu". Write with SaveOptions::libtorch_pickle.
  bool for_libtorch = false;
};

/// A key renamed in one dict.
struct KeyRename {
  Path dict;  ///< the dict, from the root
  std::string from;  ///< the key before
  std::string to;  ///< the key after
};

/// A value the weights_only repair rewrote.
struct ValueChange {
  Path path;           ///< where it is, from the root (the first path the repair met it at)
  std::string was;     ///< "argparse.Namespace", "numpy.float64 scalar", ...
  std::string became;  ///< "dict", "float", "tensor float32 [2,3]", "None (drop_unknown)", ...
};

/// What the passes did (filled further by the writer for cast statistics).
struct PassReport {
  std::vector<KeyRename> renames;  ///< every key renamed, in order
  /// Values the weights_only repair rewrote, in walk order.
  std::vector<ValueChange> repaired;
  /// Wrapper prefixes removed by --auto, per dict path ("state_dict: module.").
  std::vector<std::string> auto_stripped;
  /// Storages whose location changed, as "from -> to" with counts.
  std::vector<std::pair<std::string, uint64_t>> retagged;
  uint64_t storages_retagged = 0;
  uint64_t tensors_cast = 0;
  uint64_t storages_cast = 0;
  uint64_t tensors_kept = 0;        ///< matched a --keep glob
  uint64_t cast_bytes_before = 0;   ///< of the storages that were cast
  uint64_t cast_bytes_after = 0;
  /// The type storages were cast to (set when a cast was planned).
  std::optional<DType> cast_to;
  /// The torch release whose rules the cast follows (PassOptions::torch, or
  /// the newest ckptfix models): float8_e4m3fn overflow saturates to ±448
  /// from 2.13 on, and becomes NaN before.
  TorchVersion cast_torch = default_torch_version();
  /// Things the user should know (e.g. a shared storage that could not be cast).
  std::vector<std::string> warnings;
  /// Dicts the passes were applied to.
  std::vector<Path> dicts;
  /// The path extracted as the new root, if any.
  std::optional<std::string> extracted;
  /// The state dict was rewritten as a plain dict for LibTorch.
  bool for_libtorch = false;
  /// What fitting the state dict to a model did (PassOptions::like).
  std::optional<FitReport> fit;

  /// Whether any pass changed anything (else the output would equal the input).
  bool changed() const {
    return extracted.has_value() || for_libtorch || (fit && fit->changed) || !renames.empty() || !repaired.empty() ||
           storages_retagged > 0 || storages_cast > 0;
  }
};

/// PassOptions that validate_pass_options() accepted: checked once, then
/// applied to any number of checkpoints.
class ValidPassOptions {
 public:
  /// The options as given.
  const PassOptions& options() const { return options_; }

 private:
  friend ValidPassOptions validate_pass_options(PassOptions options);
  explicit ValidPassOptions(PassOptions options);
  PassOptions options_;
};

/// Checks what does not depend on a file (device strings, dtypes, globs,
/// options that exclude each other). Throws Error(kInvalidArgument); its
/// message names options by their field names in backquotes (`keep`).
ValidPassOptions validate_pass_options(PassOptions options);

/// Runs the passes on `checkpoint`. Throws Error(kInvalidArgument) when a
/// path in `keys` or `extract` names nothing in this file, Error(kConflict)
/// when an edit cannot be done on it (two keys would collide), leaving the
/// checkpoint in an unspecified state.
PassReport apply_passes(Checkpoint& checkpoint, const ValidPassOptions& options);

/// Validates `options`, then applies them (the two calls above).
PassReport apply_passes(Checkpoint& checkpoint, const PassOptions& options);

/// Validates a device string for a saved location ("cpu", "cuda", "cuda:3",
/// "mps", "meta", "xpu:0", ...). Throws Error(kInvalidArgument) with a hint.
void validate_device(const std::string& device);

/// Glob matching as Python's fnmatch.fnmatchcase (*, ?, [seq], [!seq]).
bool glob_match(std::string_view pattern, std::string_view text);

}  // namespace ckptfix

// Checking a checkpoint against rules, for CI gates and pre-commit hooks:
// the file opens (sound structure, no known gadget), the default torch.load
// of torch >= 2.6 (weights_only=True) would load it, and optional rules on
// devices, key prefixes, dtypes and CRCs. Nothing is written.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/dtype.h"
#include "ckptfix/fit.h"
#include "ckptfix/verify.h"
#include "ckptfix/weights_only.h"

namespace ckptfix {

/// The rules. Empty fields add no rule.
struct CheckOptions {
  /// The torch releases the file must load with (default torch.load,
  /// weights_only=True): each one's allowlist judges the globals, and a
  /// violation names the releases that would refuse. Empty: the newest
  /// release ckptfix models (default_torch_version()).
  std::vector<TorchVersion> torch;
  /// Globals outside torch's weights_only allowlist that are trusted anyway
  /// (fnmatch globs on "module.name", e.g. "mypkg.*"). Known gadgets never
  /// open, whatever these say.
  std::vector<std::string> allow_globals;
  /// Every storage must be saved on this device ("cpu").
  std::string device;
  /// No key of the checked dicts may start with one of these.
  std::vector<std::string> no_prefixes;
  /// Every floating tensor of the checked dicts must have one of these types.
  std::vector<DType> dtypes;
  /// The dicts to check ('/'-separated paths); empty: the state dicts
  /// outside optimizer states (the rules of passes.h).
  std::vector<std::string> keys;
  /// Every record's CRC-32 must match (the whole file is read first; a
  /// damaged record is what torch.load and every rewrite refuse, so it is
  /// checked unless turned off).
  bool crc = true;
  /// No tensor may hold NaN or an infinity (every tensor is read; stats.h).
  bool finite = false;
  /// The model's load_state_dict(strict=True) must accept the state dict
  /// (the one of `keys`, else chosen as load_verdict chooses it) as it is:
  /// each line torch would say is a violation (fit.h).
  std::shared_ptr<const ModelReference> like;
  /// How the file is opened (limits).
  OpenOptions open;
  /// Progress of the CRC pass: (phase, bytes done, bytes total).
  ProgressCallback progress;
};

/// One rule a file breaks.
struct CheckViolation {
  std::string where;  ///< "global 'numpy.dtype'", "key 'fc.weight'", "opcode FRAME", a record, or "structure"
  std::string what;   ///< "is outside the weights_only allowlist of torch.load (known data)"
  /// For the rules a file breaks one key or global at a time (device,
  /// no_prefixes, dtypes, globals torch.load refuses): the same violation as
  /// one of many, so that a report can say it once for all of them ("18 keys
  /// start with 'module.'"). Violations
  /// with equal `nouns` and `what_of_many` belong together.
  struct OneOfMany {
    std::string nouns;         ///< "keys", "storages"
    std::string name;          ///< the key or storage alone: "state_dict/module.fc.weight"
    std::string what_of_many;  ///< "start with 'module.'", "saved on 'cuda:0', not 'cpu'"
  };
  std::optional<OneOfMany> one_of_many;  ///< unset for the rules broken once per file
};

/// What check_file found.
struct CheckReport {
  /// Every rule broken, in the order the rules are listed above.
  std::vector<CheckViolation> violations;
  /// What the default torch.load would do (none when the CRC rule stopped
  /// the check before the file was opened): of the oldest release checked.
  std::optional<WeightsOnlyVerdict> weights_only;
  /// The same for each release checked, oldest first.
  std::vector<WeightsOnlyVerdict> weights_only_by_torch;
  /// With CheckOptions::like: what load_state_dict would say, and whether
  /// the fit repairs it.
  std::optional<LoadVerdict> load;
  /// True when nothing was found.
  bool passed() const { return violations.empty(); }
};

/// Checks that nothing in `options` can make invalid for any file (empty
/// globs and prefixes, the device string). Throws Error(kInvalidArgument)
/// naming the field in backquotes.
void validate_check_options(const CheckOptions& options);

/// Checks `file`. A file that does not open (damaged, dangerous, not a
/// checkpoint) throws the error Checkpoint::open throws, except for a damaged
/// record found by the CRC rule, which is reported as a violation.
CheckReport check_file(const std::filesystem::path& file, const CheckOptions& options);

/// Human words for a global's kind ("known data", "unknown: may run its own code when loaded").
std::string_view global_kind_description(GlobalKind kind);

}  // namespace ckptfix

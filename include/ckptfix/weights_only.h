// Would the default torch.load refuse this checkpoint, and why?
//
// Since torch 2.6, torch.load defaults to weights_only=True: a restricted
// unpickler that accepts only the globals on its allowlist and a protocol-2
// subset of pickle's opcodes. ckptfix answers for the allowlist and opcode
// table (torch/_weights_only_unpickler.py) of the torch release it is asked
// about (2.6 to 2.14; the allowlist grew, the opcodes did not change), from
// the globals and opcodes recorded while the checkpoint was read; nothing
// is loaded. For torch 1.13, whose torch.load defaults to
// weights_only=False, the verdict is that default's: it refuses only the
// globals 1.13 does not have (GlobalRef::exists_in_torch_1_13).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// What the default torch.load (weights_only=True; 1.13: weights_only=False)
/// would do with a checkpoint.
struct WeightsOnlyVerdict {
  /// The release judged for.
  TorchVersion torch;
  /// True when that release's torch.load(weights_only=True) loads the file.
  bool loads = true;
  /// Globals outside the allowlist, as the pickle spells them (module.name).
  std::vector<std::string> globals;
  /// Opcodes outside the weights_only subset, by name (STACK_GLOBAL, FRAME, ...).
  std::vector<std::string> opcodes;
};

/// The verdict for an opened checkpoint. Judges globals and opcodes: the
/// structural checks torch also makes (BUILD only on allowlisted types,
/// persistent ids only for storages) hold for everything torch.save writes.
WeightsOnlyVerdict weights_only_verdict(const Checkpoint& checkpoint, TorchVersion torch = default_torch_version());

/// The verdicts of every release ckptfix models, oldest first, with the
/// releases that give the same verdict merged: one entry per run of
/// releases, `from` and `to` its first and last.
struct WeightsOnlyRange {
  TorchVersion from;
  TorchVersion to;
  WeightsOnlyVerdict verdict;
};
std::vector<WeightsOnlyRange> weights_only_by_release(const Checkpoint& checkpoint);

/// One line for people about the releases whose default torch.load loads
/// the file: "loads with torch 2.6 to 2.14", "loads with torch >= 2.14;
/// refused by 2.6-2.13: builtins.ValueError", "refused by torch 2.6-2.14:
/// globals argparse.Namespace".
std::string describe_releases(const std::vector<WeightsOnlyRange>& ranges);

/// "weights_only", "data", "unknown", "gadget" or "function" (the JSON reports' names).
std::string_view global_kind_name(GlobalKind kind);

/// "referenced", "instantiated" or "called" (the JSON reports' names).
std::string_view global_use_name(GlobalUse use);

/// One line for people: "loads" or "refused: globals a.B, c.D; opcodes FRAME, MEMOIZE".
std::string describe(const WeightsOnlyVerdict& verdict);

}  // namespace ckptfix

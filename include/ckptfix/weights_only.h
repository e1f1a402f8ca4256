// Would the default torch.load refuse this checkpoint, and why?
//
// Since torch 2.6, torch.load defaults to weights_only=True: a restricted
// unpickler that accepts only the globals on its allowlist and a protocol-2
// subset of pickle's opcodes. ckptfix answers for torch 2.14's allowlist
// and opcode table (torch/_weights_only_unpickler.py), from the globals and
// opcodes recorded while the checkpoint was read; nothing is loaded.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// What the default torch.load (weights_only=True) would do with a checkpoint.
struct WeightsOnlyVerdict {
  /// True when torch 2.14's torch.load(weights_only=True) loads the file.
  bool loads = true;
  /// Globals outside the allowlist, as the pickle spells them (module.name).
  std::vector<std::string> globals;
  /// Opcodes outside the weights_only subset, by name (STACK_GLOBAL, FRAME, ...).
  std::vector<std::string> opcodes;
};

/// The verdict for an opened checkpoint. Judges globals and opcodes: the
/// structural checks torch also makes (BUILD only on allowlisted types,
/// persistent ids only for storages) hold for everything torch.save writes.
WeightsOnlyVerdict weights_only_verdict(const Checkpoint& checkpoint);

/// "weights_only", "data", "unknown" or "gadget" (the JSON reports' names).
std::string_view global_kind_name(GlobalKind kind);

/// One line for people: "loads" or "refused: globals a.B, c.D; opcodes FRAME, MEMOIZE".
std::string describe(const WeightsOnlyVerdict& verdict);

}  // namespace ckptfix

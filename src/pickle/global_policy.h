// Which globals a pickle may name.
//
// ckptfix never imports or calls anything, so no global can hurt ckptfix
// itself. The policy protects the *user*: a file that names a known attack
// primitive (os.system, builtins.eval, ...) is refused outright, so ckptfix
// never re-saves a booby-trapped checkpoint as if it were clean.
//
//  * kDangerous: known code-execution, file or network primitives (a denylist
//    in the spirit of picklescan/modelscan, extended with re-entrant loaders
//    and dunder attribute access). Loading fails and names the global.
//  * kSafe: what torch.load(weights_only=True) accepts in torch 2.x
//    (torch/_weights_only_unpickler.py). `check --safe` requires this set.
//  * kUnknown: everything else (argparse.Namespace, numpy, user classes).
//    Kept as opaque values and written back unchanged.
#pragma once

#include <string_view>

namespace ckptfix {

enum class GlobalSafety { kSafe, kUnknown, kDangerous };

/// Classifies module.name (name may be a dotted qualified name).
GlobalSafety classify_global(std::string_view module, std::string_view name);

}  // namespace ckptfix

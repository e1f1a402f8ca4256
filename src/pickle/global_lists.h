// The lists behind the global policy (global_policy.h), kept apart from the
// logic that applies them. Every entry is a dotted path "module.attribute"
// as a pickle spells it (module and qualified name joined by a dot).
#pragma once

#include <span>

#include "ckptfix/torch_version.h"

namespace ckptfix::global_lists {

/// torch 2.14's default weights_only allowlist, exactly: what it accepts
/// right after `import torch` (the built-in list and what import adds with
/// add_safe_globals; generated from the sid judge, and checked against the
/// running torch by tests/cli/test_globals.py).
std::span<const char* const> torch_allowlist();

/// An entry of torch_allowlist() that torch 2.6 lacks, and the first
/// release that has it.
struct AllowlistAddition {
  const char* path;
  TorchVersion since;
};
/// Every such entry but the builtin exception classes.
std::span<const AllowlistAddition> allowlist_additions();
/// The first release whose allowlist has the builtin exception classes.
TorchVersion builtin_exceptions_since();

/// The entries of torch_allowlist() that torch 1.13 does not have (its
/// torch.load fails on a pickle naming one): found by importing each entry
/// in Debian 12's torch 1.13.1; builtin exception classes, which depend on
/// the Python, are not counted.
std::span<const char* const> missing_in_torch_1_13();

/// Known data: classes and functions that build values from their arguments
/// and can neither run code nor touch files. Exact entries only: an
/// attribute of one of these (pathlib.Path.write_text) is not data.
std::span<const char* const> known_data();

/// Known gadgets: modules (every attribute below them) and single attributes
/// that run code, run commands, import, traverse attributes, or read, write
/// or fetch files when a pickle calls them. A path is a gadget when one of
/// these is a dotted prefix of it, or of any tail of its attribute chain.
std::span<const char* const> gadgets();

/// Method names that load, execute or write, refused as the last part of a
/// dotted attribute chain on any class (Model.from_pretrained, X.tofile).
std::span<const char* const> gadget_methods();

/// Modules whose functions a pickle may hold as values (GlobalKind::kFunction):
/// module.function, with function a plain name that is no gadget method.
std::span<const char* const> function_modules();

/// Callables that call the values passed to them (beyond building a value):
/// what their arguments hold counts as called (unpickler.h).
std::span<const char* const> calls_its_arguments();

/// Callables known as data that look up methods of their arguments (dict(x)
/// calls x.keys()): an object among their arguments counts as called.
std::span<const char* const> calls_methods_of_its_arguments();

}  // namespace ckptfix::global_lists

// How ckptfix judges the globals a pickle names (docs/format.md, "Globals").
//
// ckptfix never imports or calls anything, so no global can hurt ckptfix
// itself. The policy protects the *user*, who will load the file with torch:
//
//  * kWeightsOnly: in torch 2.14's default weights_only allowlist, exactly.
//    torch.load (weights_only=True, the default since torch 2.6) accepts it
//    from the release GlobalClass::allowed_since on.
//  * kData: known data. Builds a value from its arguments and can neither
//    run code nor touch files (argparse.Namespace, pathlib paths, numpy
//    arrays, omegaconf configs, datetime, ...). torch's default load refuses
//    it, but loading with weights_only=False is as safe as the file's other
//    globals.
//  * kUnknown: everything else that is not a known gadget, typically a
//    project's own classes (ultralytics.nn.tasks.DetectionModel). Kept, and
//    named in warnings: loading it runs whatever code that class has.
//  * kGadget: a known code-execution, command, import, attribute-traversal,
//    file or network primitive (os.system, pydoc.locate, gzip.open, any
//    dunder attribute, ...). Every command refuses the file, naming it,
//    even where the pickle only holds it as a value: a reference to a loader
//    has no business in a checkpoint.
//  * kFunction: a tensor function a model may hold as a value
//    (torch.nn.functional.gelu pickles as torch._C._nn.gelu, kept by
//    transformers' GELUActivation). Held, it is data; a pickle that would
//    call it while loading is refused (the unpickler judges calls).
//
// Names are judged as pickle resolves them. The module is imported, so it
// is judged by its dotted prefixes (os.path is within os). A dotted name
// (protocol 4, "torch" + "os.system") is a chain of getattr calls, and any
// link of the chain may be another module (torch.os is os), so every tail of
// the chain is judged as a path of its own too. Classification takes time
// linear in the length of the name.
#pragma once

#include <string>
#include <string_view>

#include "ckptfix/torch_version.h"
#include "pickle/value.h"

namespace ckptfix {

struct GlobalClass {
  GlobalKind kind = GlobalKind::kUnknown;
  /// For a gadget: the rule that matched, e.g. "os" for torch.os.system, or
  /// "a dunder attribute".
  std::string matched;
  /// For kWeightsOnly: the first release whose allowlist has it.
  TorchVersion allowed_since{2, 6};
};

/// Classifies module.name (name may be a dotted qualified name).
GlobalClass classify_global(std::string_view module, std::string_view name);

/// True when `torch`'s default weights_only load accepts the global
/// `module` `name` spelled as GLOBAL (torch maps __builtin__ to builtins).
/// Only canonical spellings count: a dotted name is never on the allowlist.
bool in_torch_allowlist(std::string_view module, std::string_view name,
                        TorchVersion torch = default_torch_version());

/// False for a global of torch's 2.14 allowlist that torch 1.13 does not
/// have (global_lists::missing_in_torch_1_13): 1.13's torch.load fails on it.
bool exists_in_torch_1_13(std::string_view module, std::string_view name);

/// True when calling module.name calls what is passed to it
/// (global_lists::calls_its_arguments).
bool calls_its_arguments(std::string_view module, std::string_view name);

/// Whether a call of module.name looks up methods of an object it is given
/// (global_lists::calls_methods_of_its_arguments).
bool calls_methods_of_its_arguments(std::string_view module, std::string_view name);

}  // namespace ckptfix

// Deprecated (issue 52): the LibTorch bridge is ckptfix::libtorch, in
// ckptfix/libtorch.h. This header keeps the old names, ckptfix::torch::*, for
// one release. Their namespace made every `torch::` ambiguous in code that
// says `using namespace ckptfix;`, which ckptfix/libtorch.h alone does not.
#pragma once

#include "ckptfix/libtorch.h"

namespace ckptfix {
namespace [[deprecated("ckptfix::torch is now ckptfix::libtorch (ckptfix/libtorch.h)")]] torch {
using ::ckptfix::libtorch::IncompatibleKeys;
using ::ckptfix::libtorch::load_into;
using ::ckptfix::libtorch::load_state_dict;
using ::ckptfix::libtorch::LoadOptions;
using ::ckptfix::libtorch::model_reference;
using ::ckptfix::libtorch::save_state_dict;
}  // namespace torch
}  // namespace ckptfix

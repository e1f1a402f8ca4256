// Wrapper prefixes: what DataParallel/DDP, torch.compile, Lightning and
// activation checkpointing put in front of every state-dict key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// module. (DataParallel/DDP), _orig_mod. (torch.compile), _forward_module.
/// (Lightning), _checkpoint_wrapped_module. (activation checkpointing),
/// _fsdp_wrapped_module. (FSDP).
Span<const std::string_view> known_wrapper_prefixes();

/// The chain of known wrapper prefixes every key starts with, outermost
/// first, e.g. "_orig_mod.module."; empty when there is none.
std::string shared_wrapper_prefix(Span<const std::string> keys);

}  // namespace ckptfix

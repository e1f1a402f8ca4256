// Opening one file into the model (open_file.cc): what Checkpoint::open and
// the readers that name other files share.
#pragma once

#include <functional>
#include <memory>

#include "ckptfix/checkpoint.h"
#include "io/input_file.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

/// `file` read by `read` into a new model, inside the error boundary that
/// names it; its tensor views then checked.
Checkpoint open_one_file(std::shared_ptr<const InputFile> file, const OpenOptions& options,
                         const std::function<void(CheckpointImpl&)>& read, SalvageLog* salvage = nullptr,
                         bool gadgets_as_data = false, PreparsedPickleSource preparsed = {});

}  // namespace ckptfix

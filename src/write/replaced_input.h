// Writing over a file that is also the input (--in-place, or -o IN --force):
// the output is made from the input as it was when opened, so a newer file
// another program put there meanwhile (a training run saving its next
// checkpoint) must not be replaced by it.
#pragma once

#include "io/atomic_file.h"
#include "model/checkpoint_impl.h"

namespace ckptfix {

/// When `out`'s target is one of `checkpoint`'s input files, has `out`
/// replace it only if it is still as it was when opened.
void guard_replaced_input(const CheckpointImpl& checkpoint, AtomicFile& out);

}  // namespace ckptfix

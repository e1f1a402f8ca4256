// Faults for the crash-safety tests, through save()'s seams (save_seams.h).
// Compiled only into test targets (the unit tests, ckptfix_fault_injection):
// the production ckptfix has none of this.
#pragma once

#include <string>

#include "write/save_seams.h"

namespace ckptfix {

/// "write-fails-after:N": writing fails (Error kIo, "injected fault") once N
/// bytes are written; "corrupt-before-verify": one byte of the first storage
/// record of the finished temporary file is flipped before verification;
/// "corrupt-on-device": the GPU load test changes a byte in device memory;
/// "input-shrinks-after:N:PATH": the file PATH (the input) is cut to 4 KiB
/// once more than N bytes are written, or when a copy from a file begins
/// (another program truncating the input while it is read).
/// Throws Error(kInvalidArgument) for anything else.
SaveSeams fault_seams(const std::string& fault);

}  // namespace ckptfix

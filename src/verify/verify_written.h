// The verification save() runs on its finished temporary file before it may
// replace anything (an internal of the writer: callers get its report in
// SaveResult::verification). It shares its steps with verify_file: the byte
// checks of ReadBack (the writer's own, for records it did not read back
// while writing), the GPU plan, and the re-parse.
#pragma once

#include <filesystem>

#include "model/checkpoint_impl.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"

namespace ckptfix {

/// Checks a written file against what was meant to be written. Throws
/// Error(kVerification) saying what differed (record, key, expected vs
/// found), or Error(kGpu) when the GPU load test is required but cannot run.
/// `inject_gpu_fault`: the test-only fault of the load test (load_test.h).
VerifyReport verify_written(const std::filesystem::path& file, const Checkpoint& intended, const SaveResult& written,
                            const VerifyOptions& options = {}, bool inject_gpu_fault = false);

}  // namespace ckptfix

// The verification save() runs on its finished temporary file before it may
// replace anything (an internal of the writer: callers get its report in
// SaveResult::verification). It shares its steps with verify_file: the byte
// checks of ReadBack (the writer's own, for records it did not read back
// while writing), the GPU plan, and the re-parse.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>

#include "bytes/byte_checker.h"
#include "model/checkpoint_impl.h"
#include "verify/early_reparse.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"

namespace ckptfix {

/// Error(kVerification) at `where`: what was read back differs from what was written.
Error verification_mismatch(const std::string& where, const std::string& message);

/// `e`, thrown while a file just written was read back, as the verification
/// failure it is: a reader's complaint about ckptfix's own output ("the
/// written `what` does not read back: ..."); kVerification and kGpu errors
/// are already that and come back as they are.
Error verification_failure(const Error& e, const std::string& what);

/// Checks that `entries`, a zip's records read back from the file
/// `readback` reads, are the records `written` wrote (names, places, sizes,
/// CRC-32, stored, data 64-byte aligned), and reads the bytes of each back
/// at `base` plus its offset (where the zip starts in the file) unless the
/// writer already did, storages loaded on the device as the dtype
/// `intended` writes them in; counts them in `report`. `what` names the zip
/// in messages (empty: the file is the zip).
void check_written_records(const std::vector<ZipEntry>& entries, const SaveResult& written,
                           const CheckpointImpl& intended, uint64_t base, const std::string& what, ReadBack& readback,
                           VerifyReport& report);

/// Checks a written file against what was meant to be written. Throws
/// Error(kVerification) saying what differed (record, key, expected vs
/// found), or Error(kGpu) when the GPU load test is required but cannot run.
/// `inject_gpu_fault`: the test-only fault of the load test (load_test.h).
/// `threads`: SaveOptions::threads; 1 keeps it on the caller's thread.
/// `dispose`: SaveOptions::dispose, given the checkpoint read back.
/// `early`: the parse of the file's data.pkl begun while the rest was
/// written (null: none), taken where the file holds that very record.
VerifyReport verify_written(const std::filesystem::path& file, const Checkpoint& intended, const SaveResult& written,
                            const VerifyOptions& options = {}, bool inject_gpu_fault = false, unsigned threads = 0,
                            const std::function<void(std::shared_ptr<void>)>& dispose = {},
                            EarlyReparse* early = nullptr);

}  // namespace ckptfix

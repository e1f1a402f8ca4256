// Verification on real files: a clean write verifies; a graph that differs
// from what was written, a damaged record, and a missing GPU are each
// reported with what differed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "ckptfix/checkpoint.h"
#include "ckptfix/passes.h"
#include "model/checkpoint_impl.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"
#include "test_support.h"
#include "bytes/gpu.h"
#include "verify/verify_written.h"
#include "write/fault_injection.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

using VerifyTest = test::TempDirTest;

TEST_F(VerifyTest, AWriteVerifiesAgainstWhatWasIntended) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("views_tied.pt"));
  PassOptions options;
  options.cast_to = DType::kFloat16;
  apply_passes(ck, options);
  SaveOptions save_options;
  save_options.verify_options.gpu = GpuMode::kOff;
  const SaveResult result = save(ck, dir_ / "out.pt", save_options);
  ASSERT_TRUE(result.verification.has_value());
  EXPECT_EQ(result.verification->records, result.records.size());
  EXPECT_EQ(result.verification->tensors, ck.tensor_positions().size());
  EXPECT_EQ(result.verification->gpu.status, GpuReport::Status::kOff);
}

TEST_F(VerifyTest, AGraphThatDiffersFromTheFileIsReported) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  SaveOptions no_verify;
  no_verify.verify = false;
  const SaveResult result = save(ck, dir_ / "out.pt", no_verify);
  impl_of(ck).tensors[0].stride = {1, 1, 1, 1};  // pretend the passes meant something else
  expect_error([&] { verify_written(dir_ / "out.pt", ck, result, {GpuMode::kOff}); }, ErrorKind::kVerification,
               "key 'conv.weight': stride [1,1,1,1] expected, [9,9,3,1] found");
}

TEST_F(VerifyTest, ADamagedRecordIsNamed) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  SaveOptions options;
  options.verify_options.gpu = GpuMode::kOff;
  expect_error([&] { save_with_seams(ck, dir_ / "out.pt", options, fault_seams("corrupt-before-verify")); },
               ErrorKind::kVerification,
               "plain_state_dict/data/0: the bytes read back have CRC-32");
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(VerifyTest, AWriteFailingPartWayLeavesNothing) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  for (const char* fault : {"write-fails-after:0", "write-fails-after:100", "write-fails-after:3000"}) {
    expect_error([&] { save_with_seams(ck, dir_ / "out.pt", {}, fault_seams(fault)); }, ErrorKind::kIo,
                 "injected fault");
    EXPECT_TRUE(fs::is_empty(dir_)) << fault;
  }
  expect_error([] { fault_seams("sometimes"); }, ErrorKind::kInvalidArgument, "not a known fault");
}

TEST_F(VerifyTest, NoDevicePathIsReportedNotFaked) {
  const GpuStatus& status = gpu_status();
  if (status.usable) GTEST_SKIP() << "a CUDA device is usable here: " << status.device;
  EXPECT_FALSE(status.reason.empty());
  const VerifyReport report = verify_file(test::fixture_path("cuda0.pt"), {GpuMode::kAuto});
  EXPECT_EQ(report.gpu.status, GpuReport::Status::kSkipped);
  EXPECT_EQ(gpu_status_name(report.gpu.status), "skipped");
  EXPECT_EQ(report.gpu.reason, status.reason);
  EXPECT_EQ(report.gpu.bytes, 0u);
  expect_error([] { verify_file(test::fixture_path("cuda0.pt"), {GpuMode::kRequire}); }, ErrorKind::kGpu,
               "GPU load test required but it cannot run");
  expect_error([] { open_cuda_load_test(1024, false); }, ErrorKind::kGpu, status.reason);
}

}  // namespace
}  // namespace ckptfix

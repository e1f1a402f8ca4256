// Verification on real files: a clean write verifies; a graph that differs
// from what was written, a damaged record, and a missing GPU are each
// reported with what differed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "ckptfix/checkpoint.h"
#include "ckptfix/interrupt.h"
#include "ckptfix/passes.h"
#include "model/checkpoint_impl.h"
#include "ckptfix/save.h"
#include "ckptfix/verify.h"
#include "test_support.h"
#include "bytes/byte_checker.h"
#include "bytes/gpu.h"
#include "bytes/xxh3.h"
#include "verify/verify_written.h"
#include "write/fault_injection.h"
#include "zip/crc32.h"

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

// SaveOptions::dispose takes the checkpoint verification read back, once,
// and only when there was one; it is the file as written.
TEST_F(VerifyTest, WhatVerificationReadBackGoesToDisposeWhereOneIsGiven) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("views_tied.pt"));
  std::vector<std::shared_ptr<void>> given;
  SaveOptions options;
  options.verify_options.gpu = GpuMode::kOff;
  options.dispose = [&](std::shared_ptr<void> done_with) { given.push_back(std::move(done_with)); };
  save(ck, dir_ / "out.pt", options);
  ASSERT_EQ(given.size(), 1u);
  ASSERT_NE(given[0], nullptr);
  const auto& read_back = *static_cast<const Checkpoint*>(given[0].get());
  EXPECT_EQ(read_back.tensor_positions().size(), ck.tensor_positions().size());
  options.verify = false;
  save(ck, dir_ / "unverified.pt", options);
  EXPECT_EQ(given.size(), 1u);
}

// A save with nothing to change writes the file torch wrote, byte for byte,
// whatever the storages' devices. torch's location_tag makes "cuda:1" anew
// for every storage, so its pickle spells the string out each time, where a
// constant tag ("cpu", "mps") is referred back to; the files are torch 2.6's
// and 2.14's saves of storages tagged cpu, cuda:1 (twice) and mps.
TEST_F(VerifyTest, ASaveOfTorchsFileIsTorchsBytesWhateverTheDevices) {
  for (const char* name : {"torch2.6/mixed_devices.pt", "torch2.14/mixed_devices.pt", "torch2.14/training.pt"}) {
    const Checkpoint ck = Checkpoint::open(test::fixture_path(name));
    SaveOptions options;
    options.verify_options.gpu = GpuMode::kOff;
    save(ck, dir_ / "out.pt", options);
    EXPECT_TRUE(test::read_file((dir_ / "out.pt").string()) == test::read_file(test::fixture_path(name))) << name;
    fs::remove(dir_ / "out.pt");
  }
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

// Each record ckptfix wrote from its own buffer is proven by the XXH3 of
// the bytes meant to be written (its CRC-32 was taken from the same bytes).
TEST_F(VerifyTest, ADamagedRecordIsNamed) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  SaveOptions options;
  options.verify_options.gpu = GpuMode::kOff;
  expect_error([&] { save_with_seams(ck, dir_ / "out.pt", options, fault_seams("corrupt-before-verify")); },
               ErrorKind::kVerification,
               "plain_state_dict/data/0: the bytes read back differ from the bytes meant to be written (XXH3 0x");
  EXPECT_TRUE(fs::is_empty(dir_));
}

// ReadBack proves bytes by the XXH3 of what was meant to be written where
// one was taken (the CRC-32 beside it was taken from the same bytes, so it is
// not computed again), else by the CRC-32 (a copy judged by its input's);
// records read through a mapping (1 MiB and more) and by pread alike.
TEST_F(VerifyTest, AReadBackChecksTheHashWhereOneWasTakenElseTheCrc) {
  for (const size_t size : {size_t{1000}, (size_t{2} << 20) + 100}) {
    SCOPED_TRACE(size);
    std::vector<std::byte> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>(i * 7 + i / 251);
    const fs::path path = dir_ / "written";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(size));
    const uint32_t crc = crc32_update(0, bytes);
    const uint64_t hash = record_hash(bytes);
    ReadBack read_back(path.string(), GpuMode::kOff);
    read_back.check("r", 0, size, crc, hash, std::nullopt);
    read_back.check("r", 0, size, crc, std::nullopt, std::nullopt);
    read_back.check("r", 0, size, crc ^ 1, hash, std::nullopt);  // the hash is the proof
    expect_error([&] { read_back.check("r", 0, size, crc, hash ^ 1, std::nullopt); }, ErrorKind::kVerification,
                 "r: the bytes read back differ from the bytes meant to be written (XXH3 ");
    expect_error([&] { read_back.check("r", 0, size, crc ^ 1, std::nullopt, std::nullopt); }, ErrorKind::kVerification,
                 "r: the bytes read back have CRC-32 ");
    EXPECT_EQ(read_back.bytes(), 3 * size);
  }
}

TEST_F(VerifyTest, AWriteFailingPartWayLeavesNothing) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  for (const char* fault : {"write-fails-after:0", "write-fails-after:100", "write-fails-after:3000"}) {
    expect_error([&] { save_with_seams(ck, dir_ / "out.pt", {}, fault_seams(fault)); }, ErrorKind::kIo,
                 "injected fault");
    EXPECT_TRUE(fs::is_empty(dir_)) << fault;
  }
  expect_error([] { fault_seams("sometimes"); }, ErrorKind::kInvalidArgument, "not a known fault");
  expect_error([] { fault_seams("write-fails-after:12x"); }, ErrorKind::kInvalidArgument, "expected a byte count");
  expect_error([] { fault_seams("input-shrinks-after:12"); }, ErrorKind::kInvalidArgument, "a colon and a path");
}

TEST_F(VerifyTest, AStopDuringTheReadBackIsAnInterruptionNotAFaultOfTheFile) {
  // A signal that comes while the written file is read back (issue 65's
  // batches saw it as "does not read back"): the run was interrupted.
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  SaveSeams seams;
  seams.before_verify = [](const fs::path&, const SaveResult&) { interrupt_writes(); };
  expect_error([&] { save_with_seams(ck, dir_ / "out.pt", {}, seams); }, ErrorKind::kInterrupted,
               "interrupted before the output was complete; nothing was written");
  clear_interrupt();
  EXPECT_TRUE(fs::is_empty(dir_));
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


// The input changes while it is rewritten. It shrinks (a training run
// re-saves it with torch.save, which truncates first): a one-line error
// naming the input and its record, no output, no temporary file, never a
// "Bus error". It is replaced by a newer file: an in-place rewrite, made
// from the older one, does not replace it.
class ChangingInputTest : public test::TempDirTest {
 protected:
  // A zip checkpoint {'w': a float32 tensor of `count` elements}, stored.
  void make_input(uint32_t count) {
    auto int4 = [](uint32_t v) {
      std::string s = "J";
      append_le<uint32_t>(s, v);
      return s;
    };
    test::PickleBytes p;
    p.proto().raw("}").unicode("w").global("torch._utils", "_rebuild_tensor_v2").raw("(");
    p.raw("(").unicode("storage").global("torch", "FloatStorage").unicode("0").unicode("cpu").raw(int4(count)).raw("tQ");
    p.int1(0).raw("(").raw(int4(count)).raw("t(").int1(1).raw("t\x89").global("collections", "OrderedDict");
    p.raw(")RtRs").stop();
    std::string data;
    for (uint32_t i = 0; i < count; ++i) append_le<float>(data, 1.5f);
    std::ofstream(input_, std::ios::binary)
        << test::ZipBuilder("in").add("data.pkl", p.str()).add("data/0", data).add("version", "3\n").finish();
  }

  // The input cut to 4 KiB once `after` bytes are written, or when a copy from it begins.
  SaveSeams cutting_the_input_after(uint64_t after) const {
    return fault_seams("input-shrinks-after:" + std::to_string(after) + ":" + input_.string());
  }

  // The input, opened, with a cast to float16 to write.
  Checkpoint opened_with_a_cast() const {
    Checkpoint ck = Checkpoint::open(input_);
    PassOptions passes;
    passes.cast_to = DType::kFloat16;
    apply_passes(ck, passes);
    return ck;
  }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    return names;
  }

  fs::path input_;
  void SetUp() override {
    test::TempDirTest::SetUp();
    input_ = dir_ / "in.pt";
  }
};

TEST_F(ChangingInputTest, ACastWhoseInputShrinksIsRefused) {
  for (const unsigned threads : {1u, 2u, 16u})
  for (const bool verify : {true, false}) {
    SCOPED_TRACE(std::string(verify ? "verified, " : "not verified, ") + std::to_string(threads) + " threads");
    // 16 MiB: read in slices, more of them than buffers in flight, so that
    // some are read after the first is written and the input cut.
    make_input(uint32_t{4} << 20);
    const Checkpoint ck = opened_with_a_cast();
    SaveOptions options;
    options.threads = threads;
    options.verify = verify;
    options.verify_options.gpu = GpuMode::kOff;
    expect_error([&] { save_with_seams(ck, dir_ / "out.pt", options, cutting_the_input_after(uint64_t{2} << 20)); },
                 ErrorKind::kIo,
                 "in.pt': in/data/0: the file shrank while being read (truncated or rewritten by another program?)");
    EXPECT_EQ(listing(), std::vector<std::string>{"in.pt"}) << "no output, no temporary file";
  }
}

TEST_F(ChangingInputTest, ACopyWhoseInputShrinksNamesTheInput) {
  for (const unsigned threads : {1u, 2u, 8u}) {  // with more than two, the read-back in parts
    SCOPED_TRACE(std::to_string(threads) + " threads");
    make_input(uint32_t{1} << 20);  // 4 MiB, copied unread where the output can
    const Checkpoint ck = Checkpoint::open(input_);
    SaveOptions options;
    options.threads = threads;
    options.verify_options.gpu = GpuMode::kOff;
    try {
      save_with_seams(ck, dir_ / "out.pt", options, cutting_the_input_after(UINT64_MAX));  // cut when the copy begins
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kIo);
      EXPECT_EQ(fs::path(e.file()).filename(), "in.pt") << e.what();
      EXPECT_NE(std::string(e.what()).find("in/data/0"), std::string::npos) << e.what();
    }
    EXPECT_EQ(listing(), std::vector<std::string>{"in.pt"});
  }
}

TEST_F(ChangingInputTest, AnInputRewrittenMeanwhileIsNotReplacedInPlace) {
  // A training run saves its next checkpoint over the file being rewritten
  // in place: the rewrite, made from the older one, must not replace it.
  for (const bool by_rename : {false, true}) {
    SCOPED_TRACE(by_rename ? "replaced by a rename" : "rewritten in place");
    make_input(1000);
    const Checkpoint ck = opened_with_a_cast();
    SaveOptions options;
    options.overwrite = true;
    options.verify_options.gpu = GpuMode::kOff;
    SaveSeams seams;
    seams.before_verify = [&](const fs::path&, const SaveResult&) {
      const fs::path newer = by_rename ? dir_ / "newer" : input_;
      std::ofstream(newer, std::ios::binary | std::ios::trunc) << "the newer checkpoint";
      if (by_rename) fs::rename(newer, input_);
    };
    expect_error([&] { save_with_seams(ck, input_, options, seams); }, ErrorKind::kConflict,
                 "in.pt': the file changed while it was being rewritten");
    EXPECT_EQ(test::read_file(input_.string()), "the newer checkpoint");
    EXPECT_EQ(listing(), std::vector<std::string>{"in.pt"});
  }
  make_input(1000);  // nobody changes it: replaced
  SaveOptions options;
  options.overwrite = true;
  options.verify_options.gpu = GpuMode::kOff;
  save(opened_with_a_cast(), input_, options);
  EXPECT_EQ(Checkpoint::open(input_).tensor_positions().size(), 1u);
  EXPECT_EQ(listing(), std::vector<std::string>{"in.pt"});
}

}  // namespace
}  // namespace ckptfix

// rewrite() (include/ckptfix/rewrite.h) driven directly, as a C++ program
// drives it: one test per output format and per decision the job makes
// (issue 68). The CLI's goldens and interop tests judge the same code
// through the command line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ckptfix/builder.h"
#include "ckptfix/error.h"
#include "ckptfix/rerun.h"
#include "ckptfix/rewrite.h"
#include "test_support.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;

class RewriteJobTest : public test::TempDirTest {
 protected:
  // A state dict {'module.w': 16 floats, 'module.b': 4 floats} saved as `name`.
  fs::path make_input(const std::string& name = "in.pt") {
    std::vector<float> w(16, 1.5f), b(4, -2.0f);
    const Checkpoint built = make_state_dict_checkpoint(
        {{reinterpret_cast<const std::byte*>(w.data()), w.size() * sizeof(float), DType::kFloat32, "cpu"},
         {reinterpret_cast<const std::byte*>(b.data()), b.size() * sizeof(float), DType::kFloat32, "cpu"}},
        {{"module.w", 0, 0, {16}, {1}}, {"module.b", 1, 0, {4}, {1}}});
    const fs::path path = dir_ / name;
    save(built, path);
    return path;
  }

  RewriteJob job(const fs::path& input, const fs::path& output, PassOptions passes = {}) {
    RewriteJob j;
    j.input = input;
    j.output = output;
    j.passes = std::make_shared<const ValidPassOptions>(validate_pass_options(std::move(passes)));
    j.recipe = recipe_id(*j.passes, {});
    j.save.verify_options.gpu = GpuMode::kOff;
    return j;
  }

  static PassOptions strip() {
    PassOptions p;
    p.strip_prefixes = {"module."};
    return p;
  }

  static std::vector<std::string> keys(const fs::path& path) {
    std::vector<std::string> out;
    for (const auto& sd : Checkpoint::open(path).state_dicts()) {
      out.insert(out.end(), sd.keys.begin(), sd.keys.end());
    }
    return out;
  }
};

TEST_F(RewriteJobTest, ATorchOutputByItsName) {
  const RewriteOutcome out = rewrite(job(make_input(), dir_ / "out.pt", strip()));
  EXPECT_EQ(out.status, RewriteStatus::kChanged);
  EXPECT_EQ(out.written_as, CheckpointFormat::kZip);
  ASSERT_TRUE(out.torch.has_value());
  ASSERT_TRUE(out.verification.has_value());
  EXPECT_EQ(out.verified_file, (dir_ / "out.pt").string());
  EXPECT_EQ(keys(dir_ / "out.pt"), (std::vector<std::string>{"w", "b"}));
}

TEST_F(RewriteJobTest, ASafetensorsOutputByItsNameAndAShardSet) {
  const RewriteOutcome one = rewrite(job(make_input(), dir_ / "out.safetensors", strip()));
  EXPECT_EQ(one.written_as, CheckpointFormat::kSafetensors);
  ASSERT_TRUE(one.safetensors.has_value());
  EXPECT_EQ(Checkpoint::open(dir_ / "out.safetensors").format(), CheckpointFormat::kSafetensors);
  RewriteJob sharded = job(make_input("in2.pt"), dir_ / "set" / "model.safetensors");
  fs::create_directories(dir_ / "set");
  sharded.max_shard_size = 64;  // one tensor a shard
  const RewriteOutcome set = rewrite(sharded);
  ASSERT_TRUE(set.safetensors.has_value());
  EXPECT_EQ(set.safetensors->files.size(), 3u);  // two shards and the index
  EXPECT_EQ(set.status, RewriteStatus::kChanged);
}

TEST_F(RewriteJobTest, ATorchShardSetForABinOutput) {
  RewriteJob j = job(make_input(), dir_ / "pytorch_model.bin");
  j.max_shard_size = 64;
  const RewriteOutcome out = rewrite(j);
  ASSERT_TRUE(out.torch_shards.has_value());
  EXPECT_EQ(out.shard_count, 2u);
  EXPECT_EQ(out.status, RewriteStatus::kChanged);  // a set of two shards, though nothing else changed
}

TEST_F(RewriteJobTest, ADistributedCheckpointDirectory) {
  RewriteJob j = job(make_input(), dir_ / "dcp", strip());
  j.format = OutputFormat::kDcp;
  const RewriteOutcome out = rewrite(j);
  ASSERT_TRUE(out.dcp.has_value());
  EXPECT_EQ(out.written_as, CheckpointFormat::kDcp);
  EXPECT_TRUE(fs::exists(dir_ / "dcp" / ".metadata"));
}

TEST_F(RewriteJobTest, NothingToChangeInPlaceLeavesTheInputAlone) {
  const fs::path input = make_input();
  const auto before = fs::last_write_time(input);
  RewriteJob j = job(input, input);  // no passes
  j.in_place = true;
  const RewriteOutcome out = rewrite(j);
  EXPECT_EQ(out.status, RewriteStatus::kNothingToDo);
  EXPECT_EQ(fs::last_write_time(input), before);
  // Not in place, the same job writes the file as it is.
  EXPECT_EQ(rewrite(job(input, dir_ / "copy.pt")).status, RewriteStatus::kWrittenAsIs);
}

TEST_F(RewriteJobTest, ARerunOfTheSameJobIsDoneBefore) {
  const fs::path input = make_input();
  EXPECT_EQ(rewrite(job(input, dir_ / "out.pt", strip())).status, RewriteStatus::kChanged);
  const RewriteOutcome again = rewrite(job(input, dir_ / "out.pt", strip()));
  EXPECT_EQ(again.status, RewriteStatus::kDoneBefore);
  EXPECT_EQ(again.found.state, OutputState::kDone);
}

TEST_F(RewriteJobTest, ARefusedCallIsRefusedNamingTheFile) {
  const fs::path input = dir_ / "calls.pt";
  // {'x': mypkg.make('true')}: a call of a global ckptfix does not know as data.
  const std::string pickle = test::PickleBytes()
                                 .proto()
                                 .raw("}")
                                 .unicode("x")
                                 .global("mypkg", "make")
                                 .unicode("true")
                                 .raw("\x85R")
                                 .raw("s.")
                                 .str();
  std::ofstream(input, std::ios::binary) << test::ZipBuilder().add("data.pkl", pickle).finish();
  try {
    rewrite(job(input, dir_ / "out.pt"));
    ADD_FAILURE() << "a pickle that calls mypkg.make was rewritten";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsafe) << e.what();
    EXPECT_NE(std::string(e.what()).find("mypkg.make"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("calls.pt"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "out.pt"));
  // Trusted by `allow_globals`: written, and the outcome names the call.
  RewriteJob trusted = job(input, dir_ / "out.pt");
  trusted.save.allow_globals = {"mypkg.*"};
  const RewriteOutcome out = rewrite(trusted);
  ASSERT_EQ(out.trusted_calls.size(), 1u);
  EXPECT_EQ(out.trusted_calls[0].dotted(), "mypkg.make");
}

TEST_F(RewriteJobTest, InPlaceOfADirectoryIsRefused) {
  RewriteJob dcp = job(make_input(), dir_ / "dcp");
  dcp.format = OutputFormat::kDcp;
  rewrite(dcp);
  RewriteJob j = job(dir_ / "dcp", dir_ / "dcp");
  j.in_place = true;
  test::expect_error([&] { rewrite(j); }, ErrorKind::kInvalidArgument, "`in_place` cannot rewrite a distributed");
}

TEST_F(RewriteJobTest, MetadataOnATorchOutputIsRefusedBeforeAnythingIsWritten) {
  RewriteJob j = job(make_input(), dir_ / "out.pt");
  j.metadata = {{"format", "pt"}};
  test::expect_error([&] { rewrite(j); }, ErrorKind::kInvalidArgument,
                     "`metadata` applies to safetensors outputs, and '" + (dir_ / "out.pt").string() +
                         "' is written as a torch file");
  EXPECT_FALSE(fs::exists(dir_ / "out.pt"));
}

TEST_F(RewriteJobTest, TheOutputFormatTable) {
  const Checkpoint torch_input = Checkpoint::open(make_input());
  EXPECT_EQ(output_format_of(OutputFormat::kByName, "a.safetensors", torch_input, false), CheckpointFormat::kSafetensors);
  EXPECT_EQ(output_format_of(OutputFormat::kByName, "a.bin", torch_input, false), CheckpointFormat::kZip);
  EXPECT_EQ(output_format_of(OutputFormat::kByName, "noext", torch_input, false), CheckpointFormat::kZip);
  EXPECT_EQ(output_format_of(OutputFormat::kByName, "a.safetensors", torch_input, true), CheckpointFormat::kZip);
  EXPECT_EQ(output_format_of(OutputFormat::kSafetensors, "a.pt", torch_input, false), CheckpointFormat::kSafetensors);
  EXPECT_EQ(output_format_of(OutputFormat::kDcp, "d", torch_input, false), CheckpointFormat::kDcp);
}

}  // namespace
}  // namespace ckptfix

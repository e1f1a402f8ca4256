// Issue 65 in the library: where outputs go (output_path, the fence), what
// a rerun finds (find_output, recipe_id, the record), outputs kept where
// their bytes are the same, and writes stopped from outside (interrupt.h).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "ckptfix/builder.h"
#include "ckptfix/interrupt.h"
#include "ckptfix/outputs.h"
#include "ckptfix/rerun.h"
#include "ckptfix/save.h"
#include "io/atomic_file.h"
#include "rerun/made_from.h"
#include "test_support.h"

namespace ckptfix {
namespace {

namespace fs = std::filesystem;

class RerunTest : public test::TempDirTest {
 protected:
  // A small state dict saved as `path`, with its prefix.
  fs::path make_input(const std::string& name, float value = 1.0f) {
    std::vector<float> data(16, value);
    const Checkpoint built = make_state_dict_checkpoint(
        {{reinterpret_cast<const std::byte*>(data.data()), data.size() * sizeof(float), DType::kFloat32, "cpu"}},
        {{"module.w", 0, 0, {16}, {1}}});
    const fs::path path = dir_ / name;
    SaveOptions options;
    options.overwrite = true;
    save(built, path, options);
    return path;
  }

  std::string recipe(const PassOptions& passes, const OutputRecipe& how = {}) {
    return recipe_id(validate_pass_options(passes), how);
  }

  // Strips 'module.' from `input` into `output`, recording what it is made from.
  SaveResult strip(const fs::path& input, const fs::path& output, bool keep_identical = false,
                   bool overwrite = false) {
    PassOptions passes;
    passes.strip_prefixes = {"module."};
    Checkpoint ck = Checkpoint::open(input);
    apply_passes(ck, passes);
    SaveOptions options;
    options.overwrite = overwrite;
    options.policy.made_from = MadeFrom{recipe(passes), input};
    options.policy.keep_identical = keep_identical;
    return save(ck, output, options);
  }

  MadeFrom stripped_from(const fs::path& input) {
    PassOptions passes;
    passes.strip_prefixes = {"module."};
    return {recipe(passes), input};
  }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

TEST_F(RerunTest, RecipesDifferWhereTheBytesWould) {
  PassOptions a;
  a.strip_prefixes = {"module."};
  PassOptions b = a;
  EXPECT_EQ(recipe(a), recipe(b));
  EXPECT_EQ(recipe(a).size(), 32u);
  b.strip_prefixes = {"module.", "model."};
  EXPECT_NE(recipe(a), recipe(b));
  b = a;
  b.cast_to = DType::kBFloat16;
  EXPECT_NE(recipe(a), recipe(b));
  b = a;
  b.torch = TorchVersion{1, 13};  // what a cast gives and what weights_only keeps differ by release
  EXPECT_NE(recipe(a), recipe(b));
  b.torch = default_torch_version();  // the default, said or not: the same output
  EXPECT_EQ(recipe(a), recipe(b));
  EXPECT_NE(recipe(a, {.format = "safetensors"}), recipe(a));
  EXPECT_NE(recipe(a, {.reader = "salvage"}), recipe(a));
  EXPECT_NE(recipe(a, {.metadata = {{"k", "v"}}}), recipe(a, {.metadata = {{"k", "w"}}}));
  // Fields that are strings joined differently are still told apart.
  PassOptions c, d;
  c.cast_to = d.cast_to = DType::kFloat16;
  c.keep = {"ab", "c"};
  d.keep = {"a", "bc"};
  EXPECT_NE(recipe(c), recipe(d));
  // A fit depends on what the reference says, not on its file's name.
  auto model = std::make_shared<ModelReference>(ModelReference{"ref.pt", {{"w", true, {16}, DType::kFloat32}}});
  auto renamed = std::make_shared<ModelReference>(*model);
  renamed->name = "other.pt";
  PassOptions e, f;
  e.like = model;
  f.like = renamed;
  EXPECT_EQ(recipe(e), recipe(f));
  auto reshaped = std::make_shared<ModelReference>(*model);
  reshaped->entries[0].shape = {4, 4};
  f.like = reshaped;
  EXPECT_NE(recipe(e), recipe(f));
}

TEST_F(RerunTest, AnOutputKnowsWhatItWasMadeFrom) {
  const fs::path input = make_input("in.pt");
  const fs::path output = dir_ / "out.pt";
  EXPECT_EQ(find_output(output, stripped_from(input)).state, OutputState::kAbsent);
  strip(input, output);
  EXPECT_EQ(find_output(output, stripped_from(input)).state, OutputState::kDone);
  // Other options: not done.
  PassOptions cast;
  cast.cast_to = DType::kFloat16;
  const OutputFinding other = find_output(output, {recipe(cast), input});
  EXPECT_EQ(other.state, OutputState::kOutdated);
  EXPECT_NE(other.why.find("other options"), std::string::npos) << other.why;
  // The input touched (its status-change time moves): not done.
  ::sleep(0);
  ::chmod(input.c_str(), 0600);
  const OutputFinding touched = find_output(output, stripped_from(input));
  EXPECT_EQ(touched.state, OutputState::kOutdated);
  EXPECT_NE(touched.why.find("which changed since"), std::string::npos) << touched.why;
}

TEST_F(RerunTest, AnOutputChangedSinceIsNotDone) {
  const fs::path input = make_input("in.pt");
  const fs::path output = dir_ / "out.pt";
  strip(input, output);
  {
    std::fstream f(output, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('x');
  }
  const OutputFinding found = find_output(output, stripped_from(input));
  EXPECT_EQ(found.state, OutputState::kOutdated);
  EXPECT_NE(found.why.find("changed since it was written"), std::string::npos) << found.why;
}

TEST_F(RerunTest, WithoutARecordOnlyTheBytesTell) {
  const fs::path input = make_input("in.pt");
  const fs::path output = dir_ / "out.pt";
  strip(input, output);
  ASSERT_EQ(::removexattr(output.c_str(), kMadeFromAttribute), 0);
  EXPECT_EQ(find_output(output, stripped_from(input)).state, OutputState::kUnknown);
  // The same bytes: kept as they are, and the record set for the next run.
  const auto before = fs::last_write_time(output);
  const SaveResult kept = strip(input, output, /*keep_identical=*/true);
  EXPECT_TRUE(kept.kept_existing);
  EXPECT_EQ(fs::last_write_time(output), before);
  EXPECT_EQ(find_output(output, stripped_from(input)).state, OutputState::kDone);
  EXPECT_EQ(listing(), (std::vector<std::string>{"in.pt", "out.pt"}));
  // Other bytes: refused, the file left as it is.
  std::ofstream(output, std::ios::binary | std::ios::trunc) << "someone else's file";
  test::expect_error([&] { strip(input, output, true); }, ErrorKind::kExists,
                     "output exists, and its bytes differ from what this run writes");
  EXPECT_EQ(test::read_file(output.string()), "someone else's file");
  EXPECT_EQ(listing(), (std::vector<std::string>{"in.pt", "out.pt"}));
  // overwrite replaces it.
  EXPECT_FALSE(strip(input, output, true, /*overwrite=*/true).kept_existing);
  EXPECT_EQ(find_output(output, stripped_from(input)).state, OutputState::kDone);
}

TEST_F(RerunTest, InPlaceTheOutputIsTheInput) {
  const fs::path input = make_input("model.pt");
  const MadeFrom made = stripped_from(input);
  EXPECT_EQ(find_output(input, made, /*in_place=*/true).state, OutputState::kUnknown);  // not ckptfix's yet
  SaveResult result = strip(input, input, false, /*overwrite=*/true);
  EXPECT_EQ(find_output(input, made, true).state, OutputState::kDone);
  // Seen as an output of another input, it is not: its input changed (it is itself, rewritten).
  EXPECT_EQ(find_output(input, made, false).state, OutputState::kOutdated);
}

TEST_F(RerunTest, RecordsRoundTripAndHostileOnesAreNotRecords) {
  MadeFromRecord r;
  r.recipe = "0123456789abcdef0123456789abcdef";
  r.input = "/models/a b%c\n.pt";
  r.read.push_back({"/models/a b%c\n.pt", 12, 34, -5});
  r.wrote.push_back({"out 1.pt", 56, 78, 90});
  const std::string text = record_text(r);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5);  // names with newlines are escaped
  const std::optional<MadeFromRecord> back = parse_record(text);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->input, r.input);
  EXPECT_EQ(back->read.at(0).path, r.read[0].path);
  EXPECT_EQ(back->read.at(0).changed_ns, -5);
  EXPECT_EQ(back->wrote.at(0).name, "out 1.pt");
  for (const char* hostile : {"", "ckptfix-made-from 2\n", "ckptfix-made-from 1\nrecipe x\ninput y\n",  // no file written
                              "ckptfix-made-from 1\nrecipe x\ninput y\nwrote 1 2 3 ../escape.pt\n",
                              "ckptfix-made-from 1\nrecipe x\ninput y\nwrote 1 2 3 %2F\n",
                              "ckptfix-made-from 1\nrecipe x\ninput y\nwrote 1 2 x a.pt\n",
                              "ckptfix-made-from 1\nrecipe x\ninput y\nwrote 1 2 3 a.pt\nrecipe z\n",
                              "ckptfix-made-from 1\nrecipe x\ninput y\nwrote 1 2 3 a%G1\n"}) {
    EXPECT_FALSE(parse_record(hostile)) << hostile;
  }
}

TEST_F(RerunTest, OutputsAreNamedByThePathsGivenNeverByLinks) {
  using Kind = OutputPlacement::Kind;
  EXPECT_EQ(output_path({Kind::kFile, "o.pt", ""}, {"in.pt", "in.pt"}), fs::path("o.pt"));
  EXPECT_EQ(output_path({Kind::kInPlace, "", ""}, {"snap/model.bin", "model.bin"}), fs::path("snap/model.bin"));
  EXPECT_EQ(output_path({Kind::kDirectory, "out", ""}, {"hub/snapshots/abc/pytorch_model.bin", "abc/pytorch_model.bin"}),
            fs::path("out/abc/pytorch_model.bin"));
  fs::create_directories(dir_ / "ckpt" / "step_10");
  std::ofstream(dir_ / "ckpt" / "step_10" / ".metadata") << "x";
  const RunInput dcp{(dir_ / "ckpt" / "step_10").string(), "step_10"};
  EXPECT_EQ(output_path({Kind::kDirectory, "out", "safetensors"}, dcp), fs::path("out/step_10.safetensors"));
  EXPECT_EQ(output_path({Kind::kDirectory, "out", ""}, dcp), fs::path("out/step_10.pt"));
  EXPECT_EQ(output_path({Kind::kDirectory, "out", "dcp"}, {"a/model.pt", "model.pt"}), fs::path("out/model"));
  EXPECT_EQ(format_of_output_name("x.pth.tar"), "pt");
  EXPECT_EQ(format_of_output_name("x.SAFETENSORS"), "safetensors");
  EXPECT_EQ(format_of_output_name("x"), "");
  EXPECT_FALSE(format_of_output_name("x.onnx"));
}

TEST_F(RerunTest, TheFenceKeepsWritesOffInputsAndInsideTheirDirectory) {
  const fs::path input = make_input("in.pt");
  fs::create_directories(dir_ / "out");
  fs::create_directories(dir_ / "elsewhere");
  fs::create_symlink(input, dir_ / "out" / "link.pt");
  fs::create_symlink(dir_ / "elsewhere", dir_ / "out" / "sub");
  OutputPolicy policy;
  policy.fence.inputs = std::make_shared<const std::set<FileId>>(input_file_ids({input.string()}));
  // The input by any name.
  test::expect_error([&] { AtomicFile f(input, true, &policy); }, ErrorKind::kConflict, "is an input of this run");
  test::expect_error([&] { AtomicFile f(dir_ / "out" / "link.pt", true, &policy); }, ErrorKind::kConflict,
                     "is an input of this run");
  policy.fence.replaceable = file_id(input);  // an in-place rewrite of it
  { AtomicFile f(input, true, &policy); }
  policy.fence.replaceable.reset();
  // Confined to out/: a link there is replaced, never followed; a link below it is never entered.
  policy.fence.within = dir_ / "out";
  {
    AtomicFile f(dir_ / "out" / "link.pt", true, &policy);
    f.sink().write(as_bytes("new"));
    f.commit(false);
  }
  EXPECT_FALSE(fs::is_symlink(dir_ / "out" / "link.pt"));
  EXPECT_EQ(test::read_file((dir_ / "out" / "link.pt").string()), "new");
  EXPECT_NE(test::read_file(input.string()), "new");
  test::expect_error([&] { AtomicFile f(dir_ / "out" / "sub" / "x.pt", true, &policy); }, ErrorKind::kConflict,
                     "is a symbolic link: nothing is written through a link below");
  test::expect_error([&] { AtomicFile f(dir_ / "x.pt", true, &policy); }, ErrorKind::kConflict,
                     "is outside");
  EXPECT_TRUE(fs::is_empty(dir_ / "elsewhere"));
}

TEST_F(RerunTest, AnInterruptedWriteFailsAndLeavesNothing) {
  const fs::path input = make_input("in.pt");
  interrupt_writes();
  EXPECT_TRUE(writes_interrupted());
  test::expect_error([&] { strip(input, dir_ / "out.pt"); }, ErrorKind::kInterrupted, "interrupted");
  clear_interrupt();
  EXPECT_EQ(listing(), std::vector<std::string>{"in.pt"});
  // remove_temporary_files: every live temporary file, at once.
  {
    AtomicFile f(dir_ / "out.pt", false);
    f.sink().write(as_bytes("partial"));
    f.flush();
    EXPECT_TRUE(fs::exists(f.temp_path()));
    EXPECT_EQ(remove_temporary_files(), 1u);
    EXPECT_FALSE(fs::exists(f.temp_path()));
    EXPECT_EQ(remove_temporary_files(), 0u);
  }
  EXPECT_EQ(listing(), std::vector<std::string>{"in.pt"});
  strip(input, dir_ / "out.pt");  // and writes go on once cleared
}

}  // namespace
}  // namespace ckptfix

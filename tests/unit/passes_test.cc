// The passes on in-memory checkpoints: globs, device strings, key renames
// with their _metadata, collisions and option validation. (Torch judges the
// passes end to end in tests/interop/test_passes.py.)
#include <gtest/gtest.h>

#include "ckptfix/checkpoint.h"
#include "ckptfix/passes.h"
#include "model/graph_walk.h"
#include "test_support.h"

namespace ckptfix {
namespace {

using test::expect_error;

std::vector<std::string> keys_of(const Value& dict) {
  std::vector<std::string> out;
  for (const auto& [k, v] : dict.entries()) out.push_back(k->text);
  return out;
}

std::vector<std::string> metadata_keys(const Value& dict) {
  for (const Value* state : dict.states()) {
    for (const auto& [k, v] : state->entries()) {
      if (k->text == "_metadata") return keys_of(*v);
    }
  }
  return {};
}

TEST(Glob, FollowsFnmatchcase) {
  EXPECT_TRUE(glob_match("*running_var", "bn.running_var"));
  EXPECT_TRUE(glob_match("bn.*", "bn.weight"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("layer?.w", "layer3.w"));
  EXPECT_TRUE(glob_match("layer[0-2].w", "layer1.w"));
  EXPECT_FALSE(glob_match("layer[!0-2].w", "layer1.w"));
  EXPECT_TRUE(glob_match("a*b*c", "a-x-b-y-c"));
  EXPECT_FALSE(glob_match("*running_var", "bn.running_var.x"));
  EXPECT_FALSE(glob_match("Bn.*", "bn.weight"));  // case-sensitive
  EXPECT_TRUE(glob_match("[abc", "[abc"));        // unclosed bracket is literal
}

TEST(Devices, AcceptsWhatTorchWritesAndRejectsTheRest) {
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:15", "mps", "meta", "xpu:1", "hpu:0", "npu:3", "mtia:0"}) {
    EXPECT_NO_THROW(validate_device(ok)) << ok;
  }
  expect_error([] { validate_device("cuda:x"); }, ErrorKind::kInvalidArgument, "invalid device 'cuda:x'");
  expect_error([] { validate_device("gpu"); }, ErrorKind::kInvalidArgument, "unknown device type 'gpu'");
  expect_error([] { validate_device("cpu:0"); }, ErrorKind::kInvalidArgument, "torch saves 'cpu' without an index");
  expect_error([] { validate_device("CUDA"); }, ErrorKind::kInvalidArgument, "invalid device 'CUDA'");
}

TEST(Options, ConflictsAreUsageErrors) {
  PassOptions both;
  both.to_device = "cpu";
  both.device_map = {{"cuda:0", "cpu"}};
  expect_error([&] { validate_pass_options(both); }, ErrorKind::kInvalidArgument, "use either `to_device`");
  PassOptions keep_without_dtype;
  keep_without_dtype.keep = {"*"};
  expect_error([&] { validate_pass_options(keep_without_dtype); }, ErrorKind::kInvalidArgument, "need `cast_to`");
  PassOptions int_target;
  int_target.cast_to = DType::kInt8;
  expect_error([&] { validate_pass_options(int_target); }, ErrorKind::kInvalidArgument, "cannot cast to int8");
}

TEST(StripPrefix, RewritesKeysAndMetadataLikeTorch2) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("dataparallel.pt"));
  PassOptions options;
  options.strip_prefixes = {"module."};
  const PassReport report = apply_passes(ck, options);
  EXPECT_EQ(report.renames.size(), 9u);
  EXPECT_EQ(keys_of(*impl_of(ck).root).front(), "conv.weight");
  // '' is kept (its value becomes the model's), 'module.conv' -> 'conv'.
  EXPECT_EQ(metadata_keys(*impl_of(ck).root), (std::vector<std::string>{"", "conv", "bn", "fc"}));
}

TEST(StripPrefix, RenamedKeysMoveToTheEndAsPopAndInsert) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  PassOptions options;
  options.strip_prefixes = {"bn."};
  apply_passes(ck, options);
  EXPECT_EQ(keys_of(*impl_of(ck).root),
            (std::vector<std::string>{"conv.weight", "conv.bias", "fc.weight", "fc.bias", "weight", "bias",
                                      "running_mean", "running_var", "num_batches_tracked"}));
}

TEST(StripPrefix, CollisionNamesBothKeys) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  PassOptions options;
  options.strip_prefixes = {"conv.", "fc."};
  expect_error([&] { apply_passes(ck, options); }, ErrorKind::kConflict,
               "stripping 'fc.' would make keys 'fc.weight' and 'weight' the same in '<root>'");
}

TEST(AddPrefix, WrapsMetadataLikeDataParallelAndRefusesToAddItTwice) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("plain_state_dict.pt"));
  PassOptions options;
  options.add_prefix = "module.";
  EXPECT_TRUE(apply_passes(ck, options).changed());
  EXPECT_EQ(keys_of(*impl_of(ck).root).front(), "module.conv.weight");
  EXPECT_EQ(metadata_keys(*impl_of(ck).root),
            (std::vector<std::string>{"", "module", "module.conv", "module.bn", "module.fc"}));
  // Every key has it now: a second time is refused, saying so (issue 67), and changes nothing.
  test::expect_error([&] { apply_passes(ck, options); }, ErrorKind::kConflict,
                     "every key of '<root>' already starts with 'module.': there is nothing to add");
  EXPECT_EQ(metadata_keys(*impl_of(ck).root).size(), 5u);
  EXPECT_EQ(keys_of(*impl_of(ck).root).front(), "module.conv.weight");
}

TEST(AutoStrip, PeelsNestedWrappersOutermostFirst) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("compiled_dataparallel.pt"));
  PassOptions options;
  options.auto_strip = true;
  const PassReport report = apply_passes(ck, options);
  EXPECT_EQ(report.auto_stripped, (std::vector<std::string>{"<root>: _orig_mod.module."}));
  EXPECT_EQ(keys_of(*impl_of(ck).root).front(), "conv.weight");
  EXPECT_EQ(metadata_keys(*impl_of(ck).root), (std::vector<std::string>{"", "conv", "bn", "fc"}));
}

TEST(Cast, SharedStoragesAreCastOnceOrKeptWithAWarning) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("views_tied.pt"));
  PassOptions keep_one;
  keep_one.cast_to = DType::kBFloat16;
  keep_one.keep = {"decoder.weight"};
  const PassReport report = apply_passes(ck, keep_one);
  ASSERT_EQ(report.warnings.size(), 1u);
  EXPECT_NE(report.warnings[0].find("'tied/decoder.weight'"), std::string::npos) << report.warnings[0];
  EXPECT_EQ(report.storages_cast, 1u);  // decoder.bias alone
}

TEST(Cast, KeyPathThatIsNotADictIsAnInvalidArgument) {
  Checkpoint ck = Checkpoint::open(test::fixture_path("training.pt"));
  PassOptions options;
  options.strip_prefixes = {"module."};
  options.keys = {"epoch"};
  expect_error([&] { apply_passes(ck, options); }, ErrorKind::kInvalidArgument, "key path 'epoch' names a value that is not a dict");
}

}  // namespace
}  // namespace ckptfix

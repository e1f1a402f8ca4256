// The fit's rules on keys and shapes alone (passes/fit_plan.h) and the JSON
// model reference (fit.h); end to end against torch: tests/interop/test_fit.py.
#include <gtest/gtest.h>

#include <chrono>

#include "ckptfix/error.h"
#include "ckptfix/fit.h"
#include "passes/fit_plan.h"

namespace ckptfix {
namespace {

ModelReference model(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> keys) {
  ModelReference m;
  m.name = "model";
  for (const auto& [key, shape] : keys) m.entries.push_back({key, true, shape, DType::kFloat32});
  return m;
}

std::vector<FitInput> inputs(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> keys) {
  std::vector<FitInput> out;
  for (const auto& [key, shape] : keys) out.push_back({key, true, shape, DType::kFloat32});
  return out;
}

TEST(FitPlan, KeysTheModelHasStay) {
  const auto plan = plan_fit(inputs({{"a.weight", {2}}, {"b.bias", {3}}}), model({{"b.bias", {3}}, {"a.weight", {2}}}), {});
  EXPECT_TRUE(plan.acceptable({}));
  EXPECT_EQ(plan.names, (std::vector<std::string>{"a.weight", "b.bias"}));
  EXPECT_EQ(plan.rules, (std::vector<std::string>{"", ""}));
  EXPECT_EQ(plan.source, (std::vector<int64_t>{1, 0}));
}

TEST(FitPlan, WrapperSegmentsGoWhereverTheyStandUnlessTheModelHasThem) {
  const auto m = model({{"features.0.weight", {4}}, {"head.weight", {2}}});
  const auto plan = plan_fit(inputs({{"_orig_mod.features.module.0.weight", {4}}, {"module.head.weight", {2}}}), m, {});
  ASSERT_TRUE(plan.acceptable({}));
  EXPECT_EQ(plan.names[0], "features.0.weight");
  EXPECT_EQ(plan.rules[0], "wrapper segment '_orig_mod.module.'");
  // A model that has a `module` attribute of its own keeps the segment.
  const auto own = model({{"module.weight", {4}}});
  const auto kept = plan_fit(inputs({{"module.weight", {4}}}), own, {});
  EXPECT_EQ(kept.names[0], "module.weight");
}

TEST(FitPlan, OnePrefixByVoteAndATieIsAnAmbiguity) {
  const auto m = model({{"backbone.bottom_up.layer.weight", {4}}, {"backbone.bottom_up.layer.bias", {4}}});
  const auto plan = plan_fit(inputs({{"layer.weight", {4}}, {"layer.bias", {4}}}), m, {});
  ASSERT_TRUE(plan.acceptable({}));
  EXPECT_EQ(plan.rules[0], "prefix 'backbone.bottom_up.' added");
  const auto tie = model({{"a.x.weight", {4}}, {"a.x.bias", {4}}, {"b.x.weight", {4}}, {"b.x.bias", {4}}});
  const auto refused = plan_fit(inputs({{"x.weight", {4}}, {"x.bias", {4}}}), tie, {});
  ASSERT_EQ(refused.ambiguous.size(), 1u);
  EXPECT_NE(refused.ambiguous[0].find("prefix 'a.' added"), std::string::npos);
  EXPECT_NE(refused.ambiguous[0].find("prefix 'b.' added"), std::string::npos);
  EXPECT_EQ(refused.names[0], "x.weight");  // not placed
}

TEST(FitPlan, ShapeDecidesThePrefixVote) {
  // Only "net." gives the key its shape: no tie with "other.".
  const auto m = model({{"net.fc.weight", {5, 4}}, {"net.fc.bias", {5}}, {"other.fc.weight", {3, 3}}, {"other.fc.bias", {3}}});
  const auto plan = plan_fit(inputs({{"fc.weight", {5, 4}}, {"fc.bias", {5}}}), m, {});
  ASSERT_TRUE(plan.ambiguous.empty());
  EXPECT_EQ(plan.names[0], "net.fc.weight");
}

TEST(FitPlan, OneKeyIsNoSupportForAPrefix) {
  // One name and shape in common is a coincidence: the key stays, unexpected.
  const auto m = model({{"net.fc.weight", {5, 4}}, {"net.out.weight", {2, 5}}});
  const auto plan = plan_fit(inputs({{"fc.weight", {5, 4}}, {"proj.weight", {3, 3}}}), m, {});
  EXPECT_TRUE(plan.ambiguous.empty());
  EXPECT_EQ(plan.names[0], "fc.weight");
  EXPECT_EQ(plan.unexpected.size(), 2u);
}

TEST(FitPlan, AModuleOfTheSameNamesAndShapesVotesAsADeeperTailDoes) {
  // head. -> classifier. as backbone. -> encoder.: one rule for both.
  const auto m = model({{"encoder.layer.weight", {4, 4}}, {"encoder.layer.bias", {4}},
                        {"classifier.weight", {3, 4}}, {"classifier.bias", {3}}});
  const auto head = plan_fit(inputs({{"encoder.layer.weight", {4, 4}}, {"encoder.layer.bias", {4}},
                                     {"head.weight", {3, 4}}, {"head.bias", {3}}}), m, {});
  ASSERT_TRUE(head.acceptable({})) << (head.ambiguous.empty() ? "" : head.ambiguous[0]);
  EXPECT_EQ(head.names[2], "classifier.weight");
  EXPECT_EQ(head.rules[2], "prefix 'head.' -> 'classifier.'");
  const auto backbone = plan_fit(inputs({{"backbone.layer.weight", {4, 4}}, {"backbone.layer.bias", {4}},
                                         {"classifier.weight", {3, 4}}, {"classifier.bias", {3}}}), m, {});
  ASSERT_TRUE(backbone.acceptable({}));
  EXPECT_EQ(backbone.rules[0], "prefix 'backbone.' -> 'encoder.'");
}

TEST(FitPlan, EveryKeyUnderAStrippedPrefixMustFitAndAnAddedOneMovesOnlyWhatFits) {
  const auto m = model({{"fc.weight", {5, 4}}, {"fc.bias", {5}}});
  // model.aux.weight would be aux.weight, which the model has not: the prefix is refused, naming it.
  const auto plan = plan_fit(inputs({{"model.fc.weight", {5, 4}}, {"model.fc.bias", {5}}, {"model.aux.weight", {2}}}), m, {});
  ASSERT_EQ(plan.ambiguous.size(), 1u);
  EXPECT_EQ(plan.ambiguous[0], "prefix 'model.' removed fits 2 keys, but 'model.aux.weight' under it would be "
                               "'aux.weight', which the model has not: leave it out with `drops` or say the renames "
                               "with `renames`");
  FitOptions drop;
  drop.drops = {"model.aux.*"};
  EXPECT_TRUE(plan_fit(inputs({{"model.fc.weight", {5, 4}}, {"model.fc.bias", {5}}, {"model.aux.weight", {2}}}), m, drop)
                  .acceptable(drop));
  // A new head of another size still fits by name (a size mismatch, not a refusal of the prefix).
  const auto head = plan_fit(inputs({{"model.fc.weight", {7, 4}}, {"model.fc.bias", {7}}, {"model.x.fc.weight", {1}}}),
                             model({{"fc.weight", {5, 4}}, {"fc.bias", {5}}, {"x.fc.weight", {1}}}), {});
  EXPECT_TRUE(head.ambiguous.empty());
  const auto bare = plan_fit(inputs({{"layer.weight", {4}}, {"layer.bias", {4}}, {"head.weight", {9}}}),
                             model({{"backbone.layer.weight", {4}}, {"backbone.layer.bias", {4}}}), {});
  EXPECT_TRUE(bare.ambiguous.empty());
  EXPECT_EQ(bare.names[0], "backbone.layer.weight");
  EXPECT_EQ(bare.names[2], "head.weight");  // not backbone.head.weight: unexpected as the file names it
}

TEST(FitPlan, GammaAndBetaOnlyIntoANormByItsShapes) {
  // A FiLM layer's 2-d gamma is no norm's weight; nor is a module with a 2-d tensor beside a 1-d weight.
  const auto film = plan_fit(inputs({{"film.gamma", {8, 8}}, {"film.beta", {8, 8}}}),
                             model({{"film.weight", {8, 8}}, {"film.bias", {8, 8}}}), {});
  EXPECT_EQ(film.names, (std::vector<std::string>{"film.gamma", "film.beta"}));
  EXPECT_EQ(film.unexpected.size(), 2u);
  const auto mixed = plan_fit(inputs({{"m.gamma", {8}}}), model({{"m.weight", {8}}, {"m.proj", {8, 8}}}), {});
  EXPECT_EQ(mixed.names[0], "m.gamma");
  // LayerNorm, RMSNorm (no bias), BatchNorm (its statistics beside): each a norm.
  const auto norms = plan_fit(inputs({{"ln.gamma", {4}}, {"ln.beta", {4}}, {"rms.gamma", {4}}, {"bn.gamma", {3}},
                                      {"bn.beta", {3}}, {"bn.running_mean", {3}}, {"bn.running_var", {3}}}),
                              model({{"ln.weight", {4}}, {"ln.bias", {4}}, {"rms.weight", {4}}, {"bn.weight", {3}},
                                     {"bn.bias", {3}}, {"bn.running_mean", {3}}, {"bn.running_var", {3}},
                                     {"bn.num_batches_tracked", {}}}), {});
  ASSERT_TRUE(norms.acceptable({})) << (norms.ambiguous.empty() ? "" : norms.ambiguous[0]);
  EXPECT_EQ(norms.rules[0], "gamma -> weight (a norm's)");
  EXPECT_EQ(norms.names[3], "bn.weight");
}

TEST(FitPlan, KnownRenamesOnlyWhereTheModelHasTheTargetAndNotTheSource) {
  const auto m = model({{"ln.weight", {4}}, {"ln.bias", {4}}, {"scale.gamma", {4}}});
  const auto plan = plan_fit(inputs({{"ln.gamma", {4}}, {"ln.beta", {4}}, {"scale.gamma", {4}}}), m, {});
  ASSERT_TRUE(plan.acceptable({}));
  EXPECT_EQ(plan.names, (std::vector<std::string>{"ln.weight", "ln.bias", "scale.gamma"}));
  const auto wn = model({{"fc.parametrizations.weight.original0", {3, 1}}, {"fc.parametrizations.weight.original1", {3, 4}}});
  const auto both = plan_fit(inputs({{"fc.weight_g", {3, 1}}, {"fc.weight_v", {3, 4}}}), wn, {});
  ASSERT_TRUE(both.acceptable({}));
  EXPECT_EQ(both.names[1], "fc.parametrizations.weight.original1");
  const auto dense = model({{"layer.norm1.weight", {4}}, {"conv.1.weight", {4}}});
  const auto digits = plan_fit(inputs({{"layer.norm.1.weight", {4}}, {"conv1.weight", {4}}}), dense, {});
  ASSERT_TRUE(digits.acceptable({}));
  EXPECT_EQ(digits.names, (std::vector<std::string>{"layer.norm1.weight", "conv.1.weight"}));
}

TEST(FitPlan, BatchesTrackedMadeBesideAPlacedRunningMeanAndDroppedWhereTheModelHasNone) {
  const auto bn = model({{"bn.running_mean", {4}}, {"bn.num_batches_tracked", {}}});
  const auto made = plan_fit(inputs({{"bn.running_mean", {4}}}), bn, {});
  ASSERT_TRUE(made.acceptable({}));
  EXPECT_TRUE(made.made[1]);
  const auto frozen = model({{"bn.running_mean", {4}}});
  const auto dropped = plan_fit(inputs({{"bn.running_mean", {4}}, {"bn.num_batches_tracked", {}}}), frozen, {});
  ASSERT_TRUE(dropped.acceptable({}));
  EXPECT_EQ(dropped.dropped_by[1], "num_batches_tracked, which the model has not");
}

TEST(FitPlan, RefusalsInTorchsWordsWithTheirWaysOut) {
  const auto m = model({{"fc.weight", {5, 4}}, {"fc.bias", {5}}});
  const auto in = inputs({{"fc.weight", {7, 4}}, {"zz", {1}}});
  const auto plan = plan_fit(in, m, {});
  EXPECT_FALSE(plan.acceptable({}));
  const auto lines = refusal_lines(plan, in, m, {});
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "Missing key(s) in state_dict: \"fc.bias\". (`allow_missing` writes the rest, for "
                      "load_state_dict(strict=False))");
  EXPECT_EQ(lines[1], "Unexpected key(s) in state_dict: \"zz\". (`drop_unexpected` leaves them out)");
  EXPECT_EQ(lines[2], "size mismatch for fc.weight: copying a param with shape torch.Size([7, 4]) from checkpoint, the "
                      "shape in current model is torch.Size([5, 4]). (`drop_mismatched` leaves it out)");
  FitOptions all;
  all.allow_missing = all.drop_unexpected = all.drop_mismatched = true;
  EXPECT_TRUE(plan.acceptable(all));
}

TEST(FitPlan, RenamesFirstInOrderAndOneToOne) {
  FitOptions options;
  options.renames = {{R"(^enc\.(\d+)\.)", R"(blocks.\1.)"}, {"^blocks", "layers"}};
  const auto m = model({{"layers.0.w", {2}}, {"layers.1.w", {2}}});
  const auto plan = plan_fit(inputs({{"enc.0.w", {2}}, {"enc.1.w", {2}}}), m, options);
  ASSERT_TRUE(plan.acceptable(options));
  EXPECT_EQ(plan.names[1], "layers.1.w");
  options.renames = {{"[01]", "0"}};
  const auto collide = plan_fit(inputs({{"enc.0.w", {2}}, {"enc.1.w", {2}}}), m, options);
  ASSERT_EQ(collide.ambiguous.size(), 1u);
  EXPECT_NE(collide.ambiguous[0].find("one-to-one"), std::string::npos);
}

// Found in review: two prefixes that shrink to "." never ended the loop
// that drops their shared tail; a hostile key of many wrapper segments.
TEST(FitPlan, HostileKeysEndInBoundedTime) {
  EXPECT_EQ(without_shared_tail(".", "."), (std::pair<std::string, std::string>{".", "."}));
  EXPECT_EQ(without_shared_tail(".a.", "b.a."), (std::pair<std::string, std::string>{".", "b."}));
  EXPECT_EQ(without_shared_tail("model.fc.", "fc."), (std::pair<std::string, std::string>{"model.", ""}));
  const auto m = model({{"ln.weight", {2}}, {"fc.weight", {3}}});
  const auto dots = plan_fit(inputs({{".ln.gamma", {2}}, {"fc.weight", {3}}}), m, {});
  EXPECT_EQ(dots.names.size(), 2u);
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "_fsdp_wrapped_module.module.";
  const auto began = std::chrono::steady_clock::now();
  const auto plan = plan_fit(inputs({{(deep + "fc.weight").c_str(), {3}}, {"ln.weight", {2}}}), m, {});
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(5));
  ASSERT_TRUE(plan.acceptable({}));
  EXPECT_EQ(plan.names[0], "fc.weight");
  EXPECT_EQ(plan.rules[0], "wrapper segment '_fsdp_wrapped_module.module.'");
}

TEST(FitPlan, ManyKeysStayFast) {
  // 100,000 keys behind a wrapper and a prefix: linear work, not a vote per pair.
  ModelReference m;
  std::vector<FitInput> in;
  for (int i = 0; i < 100000; ++i) {
    const std::string key = "layers." + std::to_string(i) + ".weight";
    m.entries.push_back({key, true, {4}, DType::kFloat32});
    in.push_back({"module.model." + key, true, {4}, DType::kFloat32});
  }
  const auto start = std::chrono::steady_clock::now();
  const auto plan = plan_fit(in, m, {});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(plan.acceptable({}));
  EXPECT_EQ(plan.names[99999], "layers.99999.weight");
  EXPECT_LT(seconds, 10.0);  // a generous bound for a sanitizer build; bench/ times it
}

TEST(ModelReferenceJson, ReadsTheIssuesFormInOrder) {
  const auto r = model_reference_from_json(
      R"({"b.weight": {"shape": [3, 4], "dtype": "float32"}, "a": {"shape": [], "dtype": "torch.int64"},)"
      R"( "m._extra_state": {}, "c": {"shape": [2]}})",
      "ref.json");
  ASSERT_EQ(r.entries.size(), 4u);
  EXPECT_EQ(r.entries[0].key, "b.weight");
  EXPECT_EQ(r.entries[0].shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(r.entries[1].dtype, DType::kInt64);
  EXPECT_FALSE(r.entries[2].tensor);
  EXPECT_EQ(r.entries[3].dtype, DType::kUntyped);  // not said
}

TEST(ModelReferenceJson, RefusesWhatIsNoReferenceNamingTheKey) {
  const auto fails = [](const std::string& json, const std::string& says) {
    try {
      model_reference_from_json(json, "ref.json");
      ADD_FAILURE() << "accepted " << json;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ref.json"), std::string::npos) << e.what();
    }
  };
  fails("[1, 2]", "expected an object");
  fails(R"({"a": 3})", "key 'a'");
  fails(R"({"a": {"shape": [-1]}})", "not a size");
  fails(R"({"a": {"shape": [1], "dtype": "float99"}})", "no torch dtype");
  fails(R"({"a": {}})", "extra state");
  fails(R"({"a": {"shape": [1], "colour": 1}})", "unknown field");
  fails(R"({"a": {"shape": [1]}, "a": {"shape": [1]}})", "twice");
  fails(R"({"a": {"shape": [1]})", "invalid JSON");
}

TEST(ModelReferenceJson, AMillionKeysIsLinear) {
  std::string json = "{";
  for (int i = 0; i < 1000000; ++i) {
    json += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":{\"shape\":[4,4],\"dtype\":\"float16\"}";
  }
  json += "}";
  const auto start = std::chrono::steady_clock::now();
  const auto r = model_reference_from_json(json, "big.json");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.entries.size(), 1000000u);
  EXPECT_LT(seconds, 30.0);  // linear; a quadratic repeated-key check would take hours
}

}  // namespace
}  // namespace ckptfix

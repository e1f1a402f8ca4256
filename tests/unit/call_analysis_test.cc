// What loading a pickle would do with its globals (pickle/call_analysis.h),
// and the rule every write follows with it (issue 33): one test per shape
// of call, instance and reference, read as the pickle is parsed and judged
// on the finished graph, and save() refusing what it would carry.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "ckptfix/checkpoint.h"
#include "ckptfix/save.h"
#include "pickle/call_analysis.h"
#include "pickle/unpickler.h"
#include "test_support.h"

namespace ckptfix {
namespace {

using test::expect_error;
using test::PickleBytes;
using test::ZipBuilder;

struct Use {
  GlobalUse use = GlobalUse::kReferenced;
  std::string how;
  uint64_t offset = kNoOffset;
};
using Uses = std::map<std::string, Use>;  // by "module.name"

Uses by_name(const std::vector<GlobalUsage>& usages) {
  Uses out;
  for (const GlobalUsage& u : usages) out[u.module + "." + u.name] = {u.use, u.how, u.offset};
  return out;
}

// The uses read while parsing (discarded values included), and judged on the
// finished graph (what a writer would pickle).
struct Analysed {
  Uses read;
  Uses judged;
};

Analysed analyse(const PickleBytes& p) {
  ValueGraph graph;
  const UnpickleResult r = unpickle(p.span(), graph);
  return {by_name(r.globals), by_name(reachable_global_usages(r.root))};
}

// An object pickle {'w': tensor, 'p': <value>} as a checkpoint in memory.
Checkpoint checkpoint_holding(const std::string& value_pickle) {
  PickleBytes p;
  p.proto().raw("}(").unicode("w").tensor("FloatStorage", "0", 4, 0, {4}, {1}).unicode("p").raw(value_pickle);
  p.raw("u").stop();
  return Checkpoint::from_bytes(
      ZipBuilder().add("data.pkl", p.str()).add("data/0", test::floats({1, 2, 3, 4})).add("version", "3\n").finish(),
      "in.pt");
}

TEST(CallAnalysis, AReduceOfAnUnknownGlobalIsACall) {
  PickleBytes p;
  p.proto().global("mypkg", "run").raw("(").unicode("x").raw("tR").stop();
  const Analysed a = analyse(p);
  ASSERT_TRUE(a.read.count("mypkg.run"));
  EXPECT_EQ(a.read.at("mypkg.run").use, GlobalUse::kCalled);
  EXPECT_EQ(a.read.at("mypkg.run").how, "REDUCE");
  EXPECT_EQ(a.read.at("mypkg.run").offset, p.str().size() - 2);  // the R before the STOP
  EXPECT_EQ(a.judged.at("mypkg.run").use, GlobalUse::kCalled);
  EXPECT_EQ(a.judged.at("mypkg.run").offset, p.str().size() - 2);
}

TEST(CallAnalysis, NewobjWithoutArgumentsThenAnAttributeDictIsAnInstance) {
  // How Python pickles a plain object, every module of a model pickled whole.
  PickleBytes p;
  p.proto().global("mypkg", "Net").raw(")\x81}(").unicode("training").raw("\x88ub").stop();
  const Analysed a = analyse(p);
  EXPECT_EQ(a.read.at("mypkg.Net").use, GlobalUse::kInstantiated);
  EXPECT_EQ(a.read.at("mypkg.Net").how, "NEWOBJ");
  EXPECT_EQ(a.judged.at("mypkg.Net").use, GlobalUse::kInstantiated);
}

TEST(CallAnalysis, NewobjWithArgumentsCallsTheClassesNew) {
  PickleBytes p;
  p.proto().global("mypkg", "Net").raw("(").unicode("cmd").raw("t\x81").stop();
  const Analysed a = analyse(p);
  EXPECT_EQ(a.read.at("mypkg.Net").use, GlobalUse::kCalled);
  EXPECT_EQ(a.read.at("mypkg.Net").how, "NEWOBJ with arguments");
  EXPECT_EQ(a.judged.at("mypkg.Net").use, GlobalUse::kCalled);
}

TEST(CallAnalysis, WhatGoesToAnInstancesOwnMethodsIsACallOfItsClass) {
  const std::map<std::string, std::string> shapes = {
      {"BUILD with a state other than a dict, for its __setstate__", "(K\x01tb"},  // a tuple state
      {"SETITEMS on an instance, for its __setitem__", "(K\x01K\x02u"},
  };
  for (const auto& [how, after] : shapes) {
    PickleBytes p;
    p.proto().global("mypkg", "Net").raw(")\x81").raw(after).stop();
    const Analysed a = analyse(p);
    EXPECT_EQ(a.read.at("mypkg.Net").use, GlobalUse::kCalled) << how;
    EXPECT_EQ(a.read.at("mypkg.Net").how, how);
    EXPECT_EQ(a.judged.at("mypkg.Net").use, GlobalUse::kCalled) << how;
  }
}

TEST(CallAnalysis, AppendsOnAnObjectCallsWhatTheObjectHolds) {
  // APPEND on anything but a list calls obj.append: here the file's own function.
  PickleBytes p;
  p.proto().global("types", "SimpleNamespace").raw("(}(").unicode("append").global("mypkg", "run").raw("utR");
  p.unicode("touch x").raw("a").stop();
  const Analysed a = analyse(p);
  EXPECT_EQ(a.read.at("mypkg.run").use, GlobalUse::kCalled);
  EXPECT_EQ(a.judged.at("mypkg.run").use, GlobalUse::kCalled);
}

TEST(CallAnalysis, CallsOfAttributesTheFileSetAreCalls) {
  // A second BUILD calls getattr(obj, '__setstate__'), which the first stored;
  // a slot state is setattr of each name (__class__ turns the object into an
  // instance of another class).
  const std::string first_build = "}(" + PickleBytes().unicode("__setstate__").str() +
                                  PickleBytes().global("mypkg", "run").str() + "ub";
  const std::string slot_state = "(N}(" + PickleBytes().unicode("__class__").str() +
                                 PickleBytes().global("mypkg", "run").str() + "utb";
  for (const std::string& pickle : {
           PickleBytes().proto().global("argparse", "Namespace").raw(")R").raw(first_build).raw("K\x01" "b").stop().str(),
           PickleBytes().proto().global("argparse", "Namespace").raw(")R").raw(slot_state).stop().str(),
       }) {
    ValueGraph graph;
    const UnpickleResult r = unpickle(as_bytes(pickle), graph);
    EXPECT_EQ(by_name(r.globals).at("mypkg.run").use, GlobalUse::kCalled);
    EXPECT_EQ(by_name(reachable_global_usages(r.root)).at("mypkg.run").use, GlobalUse::kCalled);
  }
}

TEST(CallAnalysis, CopyregsBuildersAreReadForWhatTheyDo) {
  struct Case {
    std::string pickle;
    std::string global;
    GlobalUse use;
  };
  const auto reconstructor = [](const std::string& base_module, const std::string& base) {
    return PickleBytes().proto().global("copy_reg", "_reconstructor").raw("(").global("mypkg", "Net")
        .global(base_module, base).raw("NtR").stop().str();
  };
  const std::vector<Case> cases = {
      // object.__new__(cls): nothing of the class runs.
      {reconstructor("__builtin__", "object"), "mypkg.Net", GlobalUse::kInstantiated},
      // base.__new__(cls, state) and base.__init__: an unknown base is called.
      {reconstructor("mypkg", "Base"), "mypkg.Base", GlobalUse::kCalled},
      {reconstructor("mypkg", "Base"), "mypkg.Net", GlobalUse::kInstantiated},
      // copyreg.__newobj__(cls, *args) is NEWOBJ spelled as a REDUCE.
      {PickleBytes().proto().global("copyreg", "__newobj__").raw("(").global("mypkg", "Net").raw("tR").stop().str(),
       "mypkg.Net", GlobalUse::kInstantiated},
      {PickleBytes().proto().global("copyreg", "__newobj__").raw("(").global("mypkg", "Net").raw("K\x01tR").stop().str(),
       "mypkg.Net", GlobalUse::kCalled},
  };
  for (const Case& c : cases) {
    ValueGraph graph;
    const UnpickleResult r = unpickle(as_bytes(c.pickle), graph);
    EXPECT_EQ(by_name(r.globals).at(c.global).use, c.use) << c.global;
    EXPECT_EQ(by_name(reachable_global_usages(r.root)).at(c.global).use, c.use) << c.global;
  }
}

TEST(CallAnalysis, AFunctionOrClassOnlyHeldIsReferenced) {
  // {'norm': partial(mypkg.LayerNorm, eps=1e-6)}: torchvision's ViT keeps one.
  PickleBytes p;
  p.proto().raw("}(").unicode("norm").global("functools", "partial").raw("(").global("mypkg", "LayerNorm");
  p.raw("tR(").global("mypkg", "LayerNorm").raw(")}(").unicode("eps").raw("K\x01uNtbu").stop();
  const Analysed a = analyse(p);
  EXPECT_FALSE(a.read.count("mypkg.LayerNorm"));  // only uses beyond holding are read
  EXPECT_EQ(a.judged.at("mypkg.LayerNorm").use, GlobalUse::kReferenced);
  EXPECT_EQ(a.judged.at("functools.partial").use, GlobalUse::kCalled);
}

TEST(CallAnalysis, CallingAPartialCallsWhatItBinds) {
  PickleBytes p;
  p.proto().global("functools", "partial").raw("(").global("mypkg", "run").raw("tR)R").stop();
  const Analysed a = analyse(p);
  EXPECT_EQ(a.read.at("mypkg.run").use, GlobalUse::kCalled);
  EXPECT_EQ(a.read.at("mypkg.run").how, "held by an object that is called");
  EXPECT_EQ(a.judged.at("mypkg.run").use, GlobalUse::kCalled);
}

TEST(CallAnalysis, WhatAnUnknownCallIsGivenIsCalled) {
  PickleBytes p;
  p.proto().global("mypkg", "Block").raw("(").global("other", "helper").raw("tR").stop();
  const Analysed a = analyse(p);
  EXPECT_EQ(a.read.at("other.helper").use, GlobalUse::kCalled);
  EXPECT_EQ(a.read.at("other.helper").how, "in the arguments of a call");
}

TEST(CallAnalysis, AClassCalledWithOnePlainValueIsSaidToBeAnEnumsShape) {
  PickleBytes p;
  p.proto().global("timm.layers.format", "Format").raw("(").unicode("NCHW").raw("tR").stop();
  EXPECT_EQ(analyse(p).read.at("timm.layers.format.Format").how, std::string("REDUCE") + kEnumShape);
}

TEST(CallAnalysis, ADiscardedCallIsReadButNotJudged) {
  // It runs when torch loads the input; it is not in the graph a writer pickles.
  PickleBytes p;
  p.proto().global("mypkg", "run").raw(")R0}").stop();
  const Analysed a = analyse(p);
  EXPECT_EQ(a.read.at("mypkg.run").use, GlobalUse::kCalled);
  EXPECT_FALSE(a.judged.count("mypkg.run"));
}

TEST(CallAnalysis, AFreedValuesMarkDoesNotPassToTheValueInItsSlot) {
  // The list given to mypkg.run is called, then discarded; the dict made
  // next may reuse its slot and holds a function that is only held.
  PickleBytes p;
  p.proto().global("mypkg", "run").raw("(]tR0}(").unicode("act").global("torch._C._nn", "gelu").raw("u").stop();
  EXPECT_NO_THROW(analyse(p));
}

TEST(CallAnalysis, AdditionsInAnOrderCPythonNeverWritesAreRefused) {
  // The writer puts APPENDS and SETITEMS before BUILD, as CPython does; a
  // pickle that adds after BUILD would load differently once re-written.
  const std::string build = "}(" + PickleBytes().unicode("append").str() + "K\x01ub";
  for (const std::string& after : {std::string("K\x02" "a"), std::string("K\x02K\x03s")}) {
    PickleBytes p;
    p.proto().global("argparse", "Namespace").raw(")R").raw(build).raw(after).stop();
    ValueGraph graph;
    expect_error([&] { unpickle(p.span(), graph); }, ErrorKind::kUnsupported,
                 "after its BUILD, an order CPython's pickler never writes and ckptfix could not write back");
  }
}

TEST(CallPolicy, UnknownCallsAreRefusedUnlessTrusted) {
  const Checkpoint ck = checkpoint_holding(PickleBytes().global("mypkg", "run").raw("(").unicode("x").raw("tR").str());
  const UnknownCalls none = unknown_calls(ck, {});
  ASSERT_EQ(none.refused.size(), 1u);
  EXPECT_EQ(none.refused[0].dotted(), "mypkg.run");
  EXPECT_EQ(none.refused[0].how, "REDUCE");
  EXPECT_EQ(none.refused[0].where.rfind("archive/data.pkl+0x", 0), 0u) << none.refused[0].where;
  const UnknownCalls trusted = unknown_calls(ck, {"other.*", "mypkg.*"});
  EXPECT_TRUE(trusted.refused.empty());
  ASSERT_EQ(trusted.trusted.size(), 1u);
  expect_error([&] { refuse_unknown_calls(ck, {}); }, ErrorKind::kUnsafe,
               "'in.pt': " + none.refused[0].where +
                   ": refusing to write a pickle that calls 'mypkg.run' (REDUCE), a global ckptfix does not know as "
                   "data; loading the output with weights_only=False would run it; the weights-only repair "
                   "(`weights_only`) turns it into plain data, or `allow_globals` trusts it");
  EXPECT_NO_THROW(refuse_unknown_calls(ck, {"mypkg.run"}));
  expect_error([&] { unknown_calls(ck, {""}); }, ErrorKind::kInvalidArgument, "`allow_globals` needs a non-empty pattern");
}

TEST(CallPolicy, InstancesAndReferencesAreWritten) {
  const Checkpoint ck = checkpoint_holding(
      PickleBytes().global("mypkg", "Net").raw(")\x81}(").unicode("act").global("mypkg", "act").raw("ub").str());
  EXPECT_TRUE(unknown_calls(ck, {}).refused.empty());
  std::map<std::string, GlobalUse> uses;
  for (const GlobalRef& g : ck.reachable_globals()) uses[g.dotted()] = g.use;
  EXPECT_EQ(uses.at("mypkg.Net"), GlobalUse::kInstantiated);
  EXPECT_EQ(uses.at("mypkg.act"), GlobalUse::kReferenced);
}

TEST(CallPolicy, AnEnumShapedCallSaysHowToTrustTheClass) {
  const Checkpoint ck =
      checkpoint_holding(PickleBytes().global("timm.layers.format", "Format").raw("(").unicode("NCHW").raw("tR").str());
  expect_error([&] { refuse_unknown_calls(ck, {}); }, ErrorKind::kUnsafe,
               "(an Enum member is pickled as a call of its class, Class(value), which a pickle cannot tell from a "
               "function: trust the class with `allow_globals`)");
}

// The pass that lets a state dict skip the walk: any unknown class or
// function anywhere in the graph, reachable or not, makes the walk happen.
TEST(CallPolicy, OnlyAGraphOfKnownGlobalsSkipsTheAnalysis) {
  auto graph_of = [](const PickleBytes& p, ValueGraph& graph) { unpickle(p.span(), graph); };
  ValueGraph known, unknown, function, discarded;
  graph_of(PickleBytes().proto().global("collections", "OrderedDict").raw(")R").stop(), known);
  EXPECT_FALSE(may_name_code(known));
  graph_of(PickleBytes().proto().global("mypkg", "Net").raw(")\x81").stop(), unknown);
  EXPECT_TRUE(may_name_code(unknown));
  graph_of(PickleBytes().proto().raw("]").global("torch._C._nn", "gelu").raw("a").stop(), function);
  EXPECT_TRUE(may_name_code(function));
  // After a known one and reached from nothing: still looked at.
  graph_of(PickleBytes().proto().global("collections", "OrderedDict").raw(")R").stop(), discarded);
  discarded.make_global("mypkg", "run");
  EXPECT_TRUE(may_name_code(discarded));
  // What is reported is the same either way: nothing for a graph of known globals.
  const Checkpoint ck = checkpoint_holding(PickleBytes().global("collections", "OrderedDict").raw(")R").str());
  const UnknownCalls calls = unknown_calls(ck, {});
  EXPECT_TRUE(calls.refused.empty() && calls.trusted.empty() && calls.unknown.empty());
}

class SavePolicyTest : public test::TempDirTest {};

TEST_F(SavePolicyTest, SaveRefusesBeforeWritingAnything) {
  const Checkpoint ck = checkpoint_holding(PickleBytes().global("mypkg", "run").raw("(").unicode("x").raw("tR").str());
  const std::filesystem::path out = dir_ / "out.pt";
  expect_error([&] { save(ck, out); }, ErrorKind::kUnsafe, "refusing to write a pickle that calls 'mypkg.run'");
  EXPECT_TRUE(std::filesystem::is_empty(dir_));
  SaveOptions trusting;
  trusting.allow_globals = {"mypkg.run"};
  save(ck, out, trusting);
  // The output still calls it, as the input did: read back, it is judged the same.
  const Checkpoint back = Checkpoint::open(out);
  ASSERT_EQ(unknown_calls(back, {}).refused.size(), 1u);
  EXPECT_EQ(unknown_calls(back, {}).refused[0].dotted(), "mypkg.run");
}

}  // namespace
}  // namespace ckptfix

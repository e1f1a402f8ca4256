// Nested pickles (include/ckptfix/nested.h, issue 66): bytes read as a
// module's extra state holds them, judged, never run. The real forms, made
// by torch, are judged by each torch in tests/cli/test_extra_states.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ckptfix/nested.h"
#include "model/bytes_values.h"
#include "pickle/unpickler.h"

namespace ckptfix {
namespace {

std::vector<NestedViolation> violations(const std::string& bytes, bool as_bytes_io = false) {
  return nested_violations(nested_pickles_of_bytes(bytes, "layer._extra_state", {}, as_bytes_io), {});
}

bool mentions(const std::vector<NestedViolation>& found, const std::string& text) {
  return std::any_of(found.begin(), found.end(),
                     [&](const NestedViolation& v) { return v.what.find(text) != std::string::npos; });
}

TEST(NestedPickles, ACallOfAGadgetIsAViolationNamingTheKeyAndTheCall) {
  const std::vector<NestedViolation> found = violations("cos\nsystem\n(S'touch x'\ntR.");
  ASSERT_FALSE(found.empty());
  EXPECT_EQ(found[0].key, "layer._extra_state");
  EXPECT_TRUE(mentions(found, "'os.system' (REDUCE at layer._extra_state+0x")) << found[0].what;
}

TEST(NestedPickles, BytesThatNameNoGlobalAreNoPickleAndData) {
  for (const std::string bytes : {std::string("hello, not a pickle"), std::string(), std::string("\x80\x04\xff", 3)}) {
    const std::vector<NestedPickle> found = nested_pickles_of_bytes(bytes, "k", {});
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].form, NestedForm::kNotAPickle);
    EXPECT_TRUE(nested_violations(found, {}).empty());
  }
  const std::vector<NestedPickle> none = nested_pickles_of_bytes("N.", "k", {});
  EXPECT_EQ(none[0].form, NestedForm::kPickle);
  EXPECT_TRUE(nested_violations(none, {}).empty());
}

TEST(NestedPickles, APickleCutAfterAGlobalMayStillRunIt) {
  // pickle.loads runs what comes before the point where it fails.
  const std::vector<NestedViolation> found = violations("cmypkg\nhook\n(tR\xff");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(mentions(found, "cannot be read")) << found[0].what;
  EXPECT_TRUE(mentions(found, "mypkg.hook")) << found[0].what;
}

TEST(NestedPickles, AnUnknownCallIsRefusedUnlessTrusted) {
  const std::string bytes = "cmypkg\nHook\n(I1\ntR.";
  const std::vector<NestedPickle> found = nested_pickles_of_bytes(bytes, "k", {});
  EXPECT_TRUE(mentions(nested_violations(found, {}), "calls 'mypkg.Hook'"));
  EXPECT_TRUE(nested_violations(found, {"mypkg.*"}).empty());
  // A known gadget is not trusted by a pattern.
  EXPECT_FALSE(nested_violations(nested_pickles_of_bytes("cos\nsystem\n(S'x'\ntR.", "k", {}), {"os.*"}).empty());
}

TEST(NestedPickles, TransformerEngineRecipeClassesAndEnumLookupsAreAllowed) {
  // Format(value) (Python < 3.11) and getattr(Format, 'HYBRID') (>= 3.11).
  EXPECT_TRUE(violations("ctransformer_engine.common.recipe\nFormat\n(I1\ntR.").empty());
  EXPECT_TRUE(
      violations("cbuiltins\ngetattr\n(ctransformer_engine.common.recipe\nFormat\nVHYBRID\ntR.").empty());
  // getattr of anything else, or of a dunder, is the gadget it always is.
  EXPECT_TRUE(mentions(violations("cbuiltins\ngetattr\n(cmypkg\nX\nVHYBRID\ntR."), "builtins.getattr"));
  EXPECT_TRUE(mentions(
      violations("cbuiltins\ngetattr\n(ctransformer_engine.common.recipe\nFormat\nV__init__\ntR."), "getattr"));
  // ... and so is calling what a lookup gave.
  EXPECT_TRUE(mentions(
      violations("cbuiltins\ngetattr\n(ctransformer_engine.common.recipe\nFormat\nVmro\ntR(tR."), "getattr"));
}

TEST(NestedPickles, LoadFromBytesIsReadAsTheStreamTorchLoadReads) {
  // _load_from_bytes(<a pickle calling os.system>): torch.load's legacy
  // path unpickles it first; discarded by POP, it still ran.
  const std::string inner = "cos\nsystem\n(S'x'\ntR.";
  const std::string outer = "ctorch.storage\n_load_from_bytes\n(C" + std::string(1, static_cast<char>(inner.size())) +
                            inner + "tR0N.";
  const std::vector<NestedPickle> found = nested_pickles_of_bytes(outer, "k", {});
  ASSERT_EQ(found.size(), 2u);
  EXPECT_EQ(found[1].holder, "torch.storage._load_from_bytes");
  EXPECT_EQ(found[1].depth, 2);
  EXPECT_TRUE(mentions(nested_violations(found, {}), "os.system"));
  // Its argument must be plain bytes.
  EXPECT_TRUE(mentions(violations("ctorch.storage\n_load_from_bytes\n(I1\ntR."), "not plain bytes"));
}

TEST(NestedPickles, DepthIsBounded) {
  // io.BytesIO(io.BytesIO(...(b'N.'))) as torch.load reads it: a pickle it unpickles first.
  std::string bytes = "N.";
  for (int i = 0; i < 6; ++i) {
    bytes = "c_io\nBytesIO\n(C" + std::string(1, static_cast<char>(bytes.size())) + bytes + "tR.";
  }
  const std::vector<NestedPickle> found = nested_pickles_of_bytes(bytes, "k", {}, /*as_bytes_io=*/true);
  EXPECT_TRUE(mentions(nested_violations(found, {}), "levels deep"));
}

TEST(BytesValues, BytesIOInBothFormsPickleGivesIt) {
  for (const std::string& pickle : {std::string("c_io\nBytesIO\n(C\x02hitR."),
                                    std::string("\x80\x02" "c_io\nBytesIO\n)\x81(C\x02hiK\x01Ntb.")}) {
    ValueGraph graph;
    UnpickleOptions options;
    options.on_global = [](const std::string&, const std::string&, uint64_t) {};
    const UnpickleResult r = unpickle(std::span(reinterpret_cast<const std::byte*>(pickle.data()), pickle.size()),
                                      graph, options);
    const std::optional<BytesIOValue> io = bytes_io_of(*r.root);
    ASSERT_TRUE(io.has_value()) << pickle;
    EXPECT_EQ(io->bytes, "hi");
  }
}

}  // namespace
}  // namespace ckptfix

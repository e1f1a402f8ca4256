// Hostile input at the unit level: global names, the unpickler's stack and
// memory, the iterative pickler and walker and their limits, printable
// text. (tests/cli/test_attacks.py runs every command on whole files.)
#include <gtest/gtest.h>

#include "ckptfix/checkpoint.h"
#include "model/graph_walk.h"
#include "pickle/global_names.h"
#include "pickle/global_policy.h"
#include "pickle/pickler.h"
#include "pickle/unpickler.h"
#include "test_support.h"

namespace ckptfix {
namespace {

using test::expect_error;
using test::PickleBytes;
using namespace std::string_literals;

UnpickleResult parse(ValueGraph& graph, const std::string& bytes, uint64_t max_values = 0) {
  UnpickleOptions options;
  options.max_values = max_values;
  return unpickle(as_bytes(bytes), graph, options);
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

TEST(GlobalNames, DottedAsciiIdentifiersOnly) {
  for (const char* ok : {"a", "torch._utils", "_rebuild_tensor_v2", "Outer.Inner", "x1.y2"}) {
    EXPECT_TRUE(is_dotted_identifier(ok)) << ok;
  }
  for (const char* bad : {"", ".", "a.", ".a", "a..b", "1a", "a b", "a\nb", "a-b", "caf\xc3\xa9", "<lambda>"}) {
    EXPECT_FALSE(is_dotted_identifier(bad)) << bad;
  }
  expect_error([] { check_global_name("collections", "OrderedDict\n0cposix\nsystem", 1024); }, ErrorKind::kCorrupt,
               "global name 'OrderedDict\\x0a0cposix\\x0asystem' is not a dotted Python identifier");
  expect_error([] { check_global_name("mod\xc3\xa8le", "C", 1024); }, ErrorKind::kUnsupported, "is not ASCII");
  expect_error([] { check_global_name("torch", std::string(2000, 'a'), 1024); }, ErrorKind::kLimit,
               "global name is 2000 bytes long (limit max_name_bytes = 1024)");
}

TEST(GlobalPolicy, ClassifiesALongDottedNameInOnePass) {
  // 200k dots: a recursion per dot overflowed the stack, and the longer
  // paths it built cost gigabytes. Now one pass.
  std::string name = "a";
  for (int i = 0; i < 200000; ++i) name += ".a";
  EXPECT_EQ(classify_global("mypackage", name).kind, GlobalKind::kUnknown);
  EXPECT_EQ(classify_global("mypackage", name + ".__globals__").kind, GlobalKind::kGadget);
  EXPECT_EQ(classify_global("os", name).kind, GlobalKind::kGadget);
  EXPECT_EQ(classify_global("mypackage", name + ".os.system").kind, GlobalKind::kGadget);
  // A dotted name reaching a dangerous module along the chain.
  EXPECT_EQ(classify_global("builtins", "eval").kind, GlobalKind::kGadget);
  EXPECT_EQ(classify_global("copyreg", "__newobj__").kind, GlobalKind::kData);
  EXPECT_EQ(classify_global("copyreg", "x.__globals__").kind, GlobalKind::kGadget);
}

TEST(Unpickler, RefusesNamesThatAreNotIdentifiers) {
  ValueGraph graph;
  PickleBytes p;  // STACK_GLOBAL with a name carrying pickle text after a newline
  p.proto(4).raw("\x8c\x0b" "collections").unicode("OrderedDict\n0cposix\nsystem").raw("\x93)R").stop();
  expect_error([&] { parse(graph, p.str()); }, ErrorKind::kCorrupt,
               "+0x2e: global name 'OrderedDict\\x0a0cposix\\x0asystem' is not a dotted Python identifier");
  expect_error([&] { parse(graph, PickleBytes().proto().raw("(icollections\nOrdered Dict\n.").str()); },
               ErrorKind::kCorrupt, "+0x3: global name 'Ordered Dict'");
  expect_error([&] { parse(graph, PickleBytes().proto().global("torch", "").stop().str()); }, ErrorKind::kCorrupt,
               "+0x2: global name ''");
}

TEST(Unpickler, MarkFencesTheStackAsInCPython) {
  ValueGraph graph;
  // POP with nothing above the innermost MARK discards the mark: `(l(0l`
  // then has no mark for its second LIST (it used to leave the mark above
  // the stack top: std::length_error).
  expect_error([&] { parse(graph, PickleBytes().proto().raw("(l(0l.").str()); }, ErrorKind::kCorrupt,
               "+0x6: pickle opcode needs a MARK but none is set");
  // Opcodes cannot reach below the innermost MARK.
  expect_error([&] { parse(graph, PickleBytes().proto().raw("](Na.").str()); }, ErrorKind::kCorrupt,
               "+0x5: pickle stack underflow");
  // POP above the mark pops the value; the mark stays for the LIST.
  Value* root = parse(graph, PickleBytes().proto().raw("(NN0l.").str()).root;
  ASSERT_EQ(root->kind, ValueKind::kList);
  EXPECT_EQ(root->items.size(), 1u);
}

TEST(Unpickler, FreesWhatThePickleDiscards) {
  {
    ValueGraph graph;  // NONE, POP a million times: one slot, reused
    Value* root = parse(graph, PickleBytes().proto().raw(repeat("N0", 1000000)).raw("N.").str()).root;
    EXPECT_EQ(root->kind, ValueKind::kNone);
    EXPECT_LE(graph.size(), 2u);
  }
  {
    ValueGraph graph;  // lists of three Nones, popped: the list and its items go
    parse(graph, PickleBytes().proto().raw(repeat("(NNNl0", 100000)).raw("N.").str());
    EXPECT_LE(graph.size(), 5u);
  }
  {
    ValueGraph graph;  // STACK_GLOBAL's operands and what only the memo held at STOP
    Value* root = parse(graph, PickleBytes().proto(4).raw("\x8c\x0b" "collections\x94\x8c\x0bOrderedDict\x94\x93"
                                                         ")R\x94N\x94" "0.").str()).root;
    EXPECT_TRUE(root->is_call_to("collections", "OrderedDict"));
    EXPECT_EQ(graph.size(), 3u);  // the object, its global, its empty tuple
  }
  {
    ValueGraph graph;  // a value kept by the memo survives its POP
    Value* root = parse(graph, PickleBytes().proto().raw("]q\x00" "0h\x00."s).str()).root;
    EXPECT_EQ(root->kind, ValueKind::kList);
  }
}

TEST(Unpickler, LimitsWhatItHoldsAtOnce) {
  ValueGraph graph;
  const std::string p = PickleBytes().proto().raw("]").raw(repeat("Na", 5000)).stop().str();
  expect_error([&] { parse(graph, p, 1000); }, ErrorKind::kLimit,
               "holds more than 1000 values, stack entries, marks and memo entries at once (limit max_pickle_values = 1000)");
  ValueGraph enough;
  EXPECT_EQ(parse(enough, p, 10000).root->items.size(), 5000u);
  ValueGraph marks;  // MARKs and repeated GETs hold memory without new values
  expect_error([&] { parse(marks, PickleBytes().proto().raw(repeat("(", 5000)).str(), 1000); }, ErrorKind::kLimit,
               "limit max_pickle_values = 1000");
  ValueGraph gets;
  expect_error([&] { parse(gets, PickleBytes().proto().raw("Nq\x00"s + repeat("h\x00"s, 5000)).str(), 1000); },
               ErrorKind::kLimit, "limit max_pickle_values = 1000");
}

TEST(Unpickler, RefusesDecimalLiteralsPythonRefuses) {
  ValueGraph graph;
  EXPECT_EQ(parse(graph, PickleBytes().proto().raw("L" + std::string(4300, '9') + "L\n.").str()).root->kind,
            ValueKind::kBigInt);
  expect_error([&] { parse(graph, PickleBytes().proto().raw("L" + std::string(4301, '9') + "L\n.").str()); },
               ErrorKind::kUnsupported, "+0x2: integer literal of 4301 digits; Python reads at most 4300");
}

TEST(Pickler, RefusesWhatItCouldNotReadBackTheSameWay) {
  ValueGraph graph;
  Value* g = graph.make_global("collections", "OrderedDict\n0cposix\nsystem\n(Vid\ntR0ccollections\nOrderedDict");
  expect_error([&] { pickle_protocol2(g); }, ErrorKind::kUnsupported, "it is not a dotted Python identifier");
  expect_error([] { pickle_length32(uint64_t{1} << 32, "a str", UINT32_MAX); }, ErrorKind::kUnsupported,
               "a str of 4294967296 bytes is longer than pickle protocol 2 can write (4294967295 bytes)");
  expect_error([] { pickle_length32(uint64_t{1} << 31, "an integer", INT32_MAX); }, ErrorKind::kUnsupported,
               "an integer of 2147483648 bytes");
  EXPECT_EQ(static_cast<uint32_t>(pickle_length32(UINT32_MAX, "a str", UINT32_MAX)), UINT32_MAX);
}

TEST(Pickler, WritesAnyDepthWithoutRecursion) {
  // [[[...]]] 200k deep, [list]-in-object states too: the writer's work is a
  // task stack on the heap, and what it writes reads back the same.
  ValueGraph graph;
  Value* root = graph.make(ValueKind::kList);
  Value* v = root;
  for (int i = 0; i < 200000; ++i) {
    Value* inner = graph.make(ValueKind::kList);
    v->items.push_back(inner);
    v = inner;
  }
  const std::string bytes = pickle_protocol2(root);
  ValueGraph back;
  Value* r = parse(back, bytes).root;
  int depth = 0;
  while (!r->items.empty()) r = r->items[0], ++depth;
  EXPECT_EQ(depth, 200000);
}

// A zip checkpoint whose pickle is `pickle` and whose one storage is four floats.
Checkpoint open_pickle(const std::string& pickle, const OpenOptions& options = {}) {
  const std::string zip = test::ZipBuilder().add("data.pkl", pickle).add("data/0", test::floats({1, 2, 3, 4}))
                              .add("version", "3\n").finish();
  return Checkpoint::from_bytes(zip, "t.pt", options);
}

TEST(GraphWalk, TiedWeightsStayAtBothKeys) {
  // {'a': t, 'b': t}: one tensor, two positions, as torch.load gives it.
  PickleBytes p;
  p.proto().raw("}(").unicode("a");
  p.tensor("FloatStorage", "0", 4, 0, {4}, {1});
  p.raw("q\x07").unicode("b").raw("h\x07u.");
  const Checkpoint ck = open_pickle(p.str());
  const auto positions = ck.tensor_positions();
  ASSERT_EQ(positions.size(), 2u);
  EXPECT_EQ(path_to_string(positions[0].path), "a");
  EXPECT_EQ(path_to_string(positions[1].path), "b");
  EXPECT_EQ(positions[0].tensor, positions[1].tensor);
}

TEST(GraphWalk, SharingAndDepthAreBounded) {
  // L0 = []; L(i+1) = [Li, Li]: 2^40 paths in a few hundred bytes.
  PickleBytes dag;
  dag.proto().raw("]q\x00"s);
  for (int i = 0; i < 40; ++i) dag.raw("](h").byte(i).raw("h").byte(i).raw("eq").byte(i + 1);
  dag.stop();
  expect_error([&] { open_pickle(dag.str()).tensor_positions(); }, ErrorKind::kLimit,
               "'t.pt': archive/data.pkl: walking the object graph takes more than");
  // 2000 nested lists: over max_depth by default, fine once it is raised
  // with the steps its paths take (a visit is charged its path's length:
  // about 2000^2 / 2 in all, what a visitor keeping every path would hold).
  const std::string deep = PickleBytes().proto().raw(repeat("]", 2000)).raw(repeat("a", 1999)).stop().str();
  expect_error([&] { open_pickle(deep); }, ErrorKind::kLimit,
               "'t.pt': archive/data.pkl: the object graph is nested more than 1000 levels deep (limit max_depth = 1000)");
  OpenOptions raised;
  raised.limits.max_depth = 5000;
  expect_error([&] { open_pickle(deep, raised); }, ErrorKind::kLimit,
               "'t.pt': archive/data.pkl: walking the object graph takes more than");
  raised.limits.max_walk_steps = 4'000'000;
  EXPECT_EQ(open_pickle(deep, raised).tensor_positions().size(), 0u);
}

TEST(GraphWalk, AVisitIsChargedWhatAVisitorMayKeep) {
  // One step for the visit, one per element of its path and per 16 bytes
  // of the path's text, one per child (and per 16 bytes of its keys).
  // {'abc...' (32 bytes): [1, 2, 3]}: the dict (0 + 1 child + 2 for its
  // key's 32 bytes), the list (1 element + 2 bytes/16 + 3 children), the
  // three ints (2 elements + 2 + 0 each).
  const std::string key(32, 'k');
  const std::string pickle = PickleBytes().proto().raw("}").unicode(key).raw("](").int1(1).int1(2).int1(3).raw("es").stop().str();
  OpenOptions exact;
  exact.limits.max_walk_steps = (1 + 0 + 0 + 3) + (1 + 1 + 2 + 3) + 3 * (1 + 2 + 2 + 0);
  EXPECT_NO_THROW(open_pickle(pickle, exact).tensor_positions());
  exact.limits.max_walk_steps -= 1;
  expect_error([&] { open_pickle(pickle, exact).tensor_positions(); }, ErrorKind::kLimit,
               "walking the object graph takes more than");
}

TEST(ReadLimits, SetByName) {
  ReadLimits limits;
  EXPECT_TRUE(limits.set("max_depth", 7));
  EXPECT_EQ(limits.max_depth, 7u);
  EXPECT_FALSE(limits.set("max_nothing", 7));
  EXPECT_EQ(ReadLimits::names().size(), 9u);
}

TEST(Printable, EscapesWhatMovesTheCursorOrIsNotText) {
  EXPECT_EQ(printable("conv.weight"), "conv.weight");
  EXPECT_EQ(printable("caf\xc3\xa9 \xe4\xb8\xad"), "caf\xc3\xa9 \xe4\xb8\xad");  // letters stay
  EXPECT_EQ(printable("\x1b[2Jred\nmodel.pt: ok\t\x7f"), "\\x1b[2Jred\\x0amodel.pt: ok\\x09\\x7f");
  EXPECT_EQ(printable("w\xff\xfe"), "w\\xff\\xfe");                    // not UTF-8
  EXPECT_EQ(printable("\xc2\x85\xe2\x80\xae" "evil\xe2\x80\xa8"), "\\x85\\u202eevil\\u2028");  // C1, bidi, separator
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");              // an encoded surrogate
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                       // overlong
  const std::string once = printable("a\\b\x1b\xff");
  EXPECT_EQ(printable(once), once);  // idempotent: text may pass through twice
  EXPECT_TRUE(is_valid_utf8("caf\xc3\xa9"));
  EXPECT_FALSE(is_valid_utf8("w\xff"));
  // Every part of an Error is printable, so what() is one line.
  Error e(ErrorKind::kCorrupt, "key 'a\nb'");
  e.in_file("evil\x1b.pt").at("key 'x\ry'");
  EXPECT_STREQ(e.what(), "'evil\\x1b.pt': key 'x\\x0dy': key 'a\\x0ab'");
}

}  // namespace
}  // namespace ckptfix

// The pickle layer on in-memory bytes: the value graph the unpickler builds,
// memo sharing, the dangerous-global policy, and one test per pickle error.
// (CPython judges the full opcode range in tests/interop/test_pickle_roundtrip.py.)
#include <gtest/gtest.h>

#include "pickle/global_policy.h"
#include "pickle/pickler.h"
#include "pickle/unpickler.h"
#include "test_support.h"

namespace ckptfix {
namespace {

using test::expect_error;
using test::PickleBytes;
using namespace std::string_literals;  // literals below contain NUL bytes

Value* parse(ValueGraph& graph, const std::string& bytes) { return unpickle(as_bytes(bytes), graph).root; }

TEST(Unpickler, BuildsAnOrderedDictStateDictWithMetadata) {
  // Bytes CPython wrote for torch.nn.Linear(3, 2).state_dict() (torch 1.13).
  ValueGraph graph;
  PickleBytes p;
  p.proto().global("collections", "OrderedDict").raw(")R(").unicode("weight");
  p.tensor("FloatStorage", "0", 6, 0, {2, 3}, {3, 1});
  p.raw("u}").unicode("_metadata").global("collections", "OrderedDict").raw(")R").unicode("").raw("}");
  p.unicode("version").int1(1).raw("sssb").stop();
  Value* root = parse(graph, p.str());
  ASSERT_TRUE(root->is_call_to("collections", "OrderedDict"));
  ASSERT_EQ(root->entries().size(), 1u);
  EXPECT_EQ(root->entries()[0].first->text, "weight");
  EXPECT_TRUE(root->entries()[0].second->is_call_to("torch._utils", "_rebuild_tensor_v2"));
  ASSERT_EQ(root->states().size(), 1u);  // the BUILD that sets _metadata
  EXPECT_EQ(root->states()[0]->entries()[0].first->text, "_metadata");
}

TEST(Unpickler, MemoKeepsSharingAndCycles) {
  ValueGraph graph;
  // l = []; l.append(l); [x, x] where x = l
  Value* root = parse(graph, PickleBytes().proto().raw("]q\x00h\x00\x61h\x00h\x00\x86."s).str());
  ASSERT_EQ(root->kind, ValueKind::kTuple);
  EXPECT_EQ(root->items[0], root->items[1]);
  EXPECT_EQ(root->items[0]->items[0], root->items[0]);
}

TEST(Unpickler, NumbersKeepTheirExactValues) {
  ValueGraph graph;
  PickleBytes p;
  p.proto().raw("(").raw("J\xff\xff\xff\xff");                  // BININT -1
  p.raw("M\xff\xff");                                           // BININT2 65535 (unsigned)
  p.raw("\x8a\x06\x00\x00\x00\x00\x00\x01"s);                    // LONG1 2**40
  p.raw("\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01"s);        // LONG1 2**64
  p.raw("G\x7f\xf8\x00\x00\x00\x00\x00\x01"s);                   // BINFLOAT NaN with payload (big-endian)
  p.raw("t.");
  Value* root = parse(graph, p.str());
  ASSERT_EQ(root->items.size(), 5u);
  EXPECT_EQ(root->items[0]->integer, -1);
  EXPECT_EQ(root->items[1]->integer, 65535);
  EXPECT_EQ(root->items[2]->integer, int64_t{1} << 40);
  EXPECT_EQ(root->items[3]->kind, ValueKind::kBigInt);
  EXPECT_EQ(root->items[4]->float_bits, 0x7ff8000000000001ull);
}

TEST(Unpickler, ProtocolZeroTextOpcodes) {
  ValueGraph graph;
  Value* root = parse(graph, "(dp0\nS'a\\n'\np1\nI01\nsVcaf\\u00e9\np2\nL12345678901234567890L\ns.");
  ASSERT_EQ(root->kind, ValueKind::kDict);
  ASSERT_EQ(root->entries().size(), 2u);
  EXPECT_EQ(root->entries()[0].first->kind, ValueKind::kPyStr);
  EXPECT_EQ(root->entries()[0].first->text, "a\n");
  EXPECT_EQ(root->entries()[0].second->kind, ValueKind::kBool);
  EXPECT_EQ(root->entries()[1].first->text, "caf\xc3\xa9");
  EXPECT_EQ(root->entries()[1].second->kind, ValueKind::kBigInt);
}

TEST(Unpickler, StackGlobalIsCheckedLikeGlobal) {
  ValueGraph graph;
  PickleBytes p;  // protocol 4: STACK_GLOBAL hides the names on the stack
  p.proto(4).raw("\x8c\x02os\x94\x8c\x06system\x94\x93\x94").stop();
  expect_error([&] { parse(graph, p.str()); }, ErrorKind::kUnsafe, "'os.system'");
}

TEST(Unpickler, ErrorUnknownOpcode) {
  ValueGraph graph;
  expect_error([&] { parse(graph, PickleBytes().proto().raw("\xff").str()); }, ErrorKind::kCorrupt,
               "+0x2: unknown pickle opcode 0xff");
}

TEST(Unpickler, ErrorTruncatedArgument) {
  ValueGraph graph;
  expect_error([&] { parse(graph, PickleBytes().proto().raw("X\x05\x00\x00\x00"s "ab").str()); }, ErrorKind::kCorrupt,
               "+0x2: length 5 runs past the end of the pickle (truncated)");
}

TEST(Unpickler, ErrorMissingStop) {
  ValueGraph graph;
  expect_error([&] { parse(graph, PickleBytes().proto().raw("N").str()); }, ErrorKind::kCorrupt,
               "+0x3: pickle data ends before its STOP opcode (truncated)");
}

TEST(Unpickler, ErrorStackUnderflow) {
  ValueGraph graph;
  expect_error([&] { parse(graph, PickleBytes().proto().stop().str()); }, ErrorKind::kCorrupt,
               "+0x2: pickle stack underflow");
}

TEST(Unpickler, ErrorMemoNeverStored) {
  ValueGraph graph;
  expect_error([&] { parse(graph, PickleBytes().proto().raw("h\x05.").str()); }, ErrorKind::kCorrupt,
               "memo entry 5, which was never stored");
}

TEST(Unpickler, ErrorReduceWithoutTuple) {
  ValueGraph graph;
  expect_error([&] { parse(graph, PickleBytes().proto().global("collections", "OrderedDict").raw("NR.").str()); },
               ErrorKind::kCorrupt, "REDUCE arguments are not a tuple");
}

TEST(Unpickler, ErrorExtensionRegistry) {
  ValueGraph graph;
  expect_error([&] { parse(graph, PickleBytes().proto().raw("\x82\x01.").str()); }, ErrorKind::kUnsupported,
               "extension registry");
}

TEST(Unpickler, ErrorDangerousGlobalNamesIt) {
  ValueGraph graph;
  expect_error([&] { parse(graph, PickleBytes().proto().global("posix", "system").unicode("id").raw("\x85R.").str()); },
               ErrorKind::kUnsafe, "+0x2: refusing to load: the pickle references the dangerous global 'posix.system'");
}

TEST(GlobalPolicy, ClassifiesAttackPrimitivesAndTorchAllowlist) {
  for (auto [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"os", "system"}, {"posix", "system"}, {"nt", "system"}, {"subprocess", "Popen"},
           {"builtins", "eval"}, {"__builtin__", "exec"}, {"builtins", "getattr"}, {"builtins", "__import__"},
           {"sys", "modules"}, {"runpy", "run_path"}, {"shutil", "rmtree"}, {"socket", "socket"},
           {"pty", "spawn"}, {"pickle", "loads"}, {"importlib", "import_module"}, {"ctypes", "CDLL"},
           {"webbrowser", "open"}, {"torch", "__builtins__"}, {"torch.serialization", "load"},
           {"os.path", "join"}, {"pathlib", "Path.write_text"}, {"builtins", "open"}}) {
    EXPECT_EQ(classify_global(module, name), GlobalSafety::kDangerous) << module << "." << name;
  }
  for (auto [module, name] : std::vector<std::pair<std::string, std::string>>{
           {"collections", "OrderedDict"}, {"torch._utils", "_rebuild_tensor_v2"}, {"torch", "FloatStorage"},
           {"torch", "bfloat16"}, {"torch.nn.parameter", "Parameter"}, {"_codecs", "encode"}}) {
    EXPECT_EQ(classify_global(module, name), GlobalSafety::kSafe) << module << "." << name;
  }
  EXPECT_EQ(classify_global("argparse", "Namespace"), GlobalSafety::kUnknown);
  EXPECT_EQ(classify_global("numpy.core.multiarray", "scalar"), GlobalSafety::kUnknown);
  EXPECT_EQ(classify_global("copyreg", "__newobj__"), GlobalSafety::kUnknown);
}

TEST(Pickler, WritesCPythonProtocol2Bytes) {
  // What CPython writes for OrderedDict([('a', [1, 1.5, 'x'])]) at protocol 2.
  const std::string cpython =
      "\x80\x02" "ccollections\nOrderedDict\nq\x00)Rq\x01X\x01\x00\x00\x00"s
      "aq\x02]q\x03(K\x01G?\xf8\x00\x00\x00\x00\x00\x00X\x01\x00\x00\x00"s "xq\x04" "es.";
  ValueGraph graph;
  Value* root = parse(graph, cpython);
  EXPECT_EQ(pickle_protocol2(root), cpython);
}

TEST(Pickler, RejectsATupleThatContainsItself) {
  ValueGraph graph;
  Value* t = graph.make_tuple({});
  t->items.push_back(t);
  expect_error([&] { pickle_protocol2(t); }, ErrorKind::kUnsupported, "a tuple contains itself");
}

}  // namespace
}  // namespace ckptfix

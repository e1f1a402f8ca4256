// ckptfix::libtorch judged by Python torch: load_state_dict against reference
// data that /usr/bin/python3 produces at test time (tests/torch/reference.py),
// save_state_dict against torch.load (tests/torch/compare_saved.py),
// load_into with a LibTorch module, zero-copy loading measured in resident
// anonymous memory, and convert --for-libtorch against LibTorch's own
// torch::jit::pickle_load.
#include <gtest/gtest.h>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/cuda.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckptfix/error.h"
#include "ckptfix/libtorch.h"
#include "ckptfix/torch.h"  // the old names, deprecated (TheOldNamesStillWorkDeprecated)
#include "libtorch/device_staging.h"
#include "libtorch/read_threads.h"

namespace {

namespace fs = std::filesystem;
using ckptfix::Error;
using ckptfix::ErrorKind;

const std::string kFixtures = CKPTFIX_FIXTURES;
const std::string kTests = CKPTFIX_TESTS;
const std::string kPython = CKPTFIX_PYTHON;

std::string fixture(const std::string& name) { return kFixtures + "/" + name; }

// Runs a command, returns its stdout; fails the test on a non-zero exit.
std::string run(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed");
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int rc = ::pclose(pipe);
  if (status != nullptr) {
    *status = rc;
  } else if (rc != 0) {
    ADD_FAILURE() << command << " exited " << rc << "\n" << out;
  }
  return out;
}

std::string hex(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (int64_t i = 0; i < c.numel() * c.element_size(); ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

// Python's name of a ScalarType (torch.<name>), for every type any LibTorch
// has; c10::toString spells them "Float8_e4m3fn", "ComplexHalf", ...
std::string python_name(c10::ScalarType type) {
  static const std::map<std::string, std::string> names = {
      {"Half", "float16"}, {"BFloat16", "bfloat16"}, {"Float", "float32"}, {"Double", "float64"},
      {"Char", "int8"}, {"Byte", "uint8"}, {"Short", "int16"}, {"Int", "int32"}, {"Long", "int64"},
      {"Bool", "bool"}, {"ComplexHalf", "complex32"}, {"ComplexFloat", "complex64"},
      {"ComplexDouble", "complex128"}, {"QInt8", "qint8"}, {"QUInt8", "quint8"}, {"QInt32", "qint32"},
      {"QUInt4x2", "quint4x2"}, {"QUInt2x4", "quint2x4"}, {"UInt16", "uint16"}, {"UInt32", "uint32"},
      {"UInt64", "uint64"}, {"Float8_e4m3fn", "float8_e4m3fn"}, {"Float8_e5m2", "float8_e5m2"},
      {"Float8_e4m3fnuz", "float8_e4m3fnuz"}, {"Float8_e5m2fnuz", "float8_e5m2fnuz"},
      {"Float8_e8m0fnu", "float8_e8m0fnu"}, {"Float4_e2m1fn_x2", "float4_e2m1fn_x2"}, {"Bits8", "bits8"},
      {"Bits16", "bits16"}, {"Bits1x8", "bits1x8"}, {"Bits2x4", "bits2x4"}, {"Bits4x2", "bits4x2"},
      {"BComplex32", "bcomplex32"}};
  const auto it = names.find(c10::toString(type));
  return it == names.end() ? std::string("?") + c10::toString(type) : it->second;
}

std::string dtype_name(const at::Tensor& t) { return python_name(t.scalar_type()); }

// The dtypes torch.save writes as a typed storage (_rebuild_tensor_v2),
// which torch 1.13 can load; the others go as UntypedStorage + dtype.
bool has_typed_storage(const std::string& python_dtype) {
  static const std::set<std::string> typed = {"float16", "bfloat16", "float32", "float64", "int8",
                                              "uint8",   "int16",    "int32",   "int64",   "bool",
                                              "complex64", "complex128"};
  return typed.count(python_dtype) != 0;
}

// Every non-quantized ScalarType this LibTorch can make a tensor of.
std::vector<c10::ScalarType> creatable_scalar_types() {
  std::vector<c10::ScalarType> out;
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    const auto type = static_cast<c10::ScalarType>(i);
    if (c10::isQIntType(type)) continue;
    try {
      (void)at::empty({1}, at::TensorOptions().dtype(type)).data_ptr();
      out.push_back(type);
    } catch (const c10::Error&) {  // the shell dtypes (uint1..7, int1..7) cannot hold data
    }
  }
  return out;
}

struct Case {
  std::string file, key, strip, dtype;
  std::string reference;  // the file Python loads for the reference, when it cannot load `file` itself
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.file << " key='" << c.key << "' strip='" << c.strip << "' dtype='" << c.dtype << "'";
}

class LoadStateDict : public ::testing::TestWithParam<Case> {};

// load_state_dict(file) must equal what Python's torch.load gives (of
// `reference_file` when Python cannot load `file` itself).
void expect_equals_python(const std::string& file, const Case& c, const std::string& reference_file) {
  std::string command = kPython + " " + kTests + "/torch/reference.py " + reference_file;
  if (!c.key.empty()) command += " --key " + c.key;
  if (!c.strip.empty()) command += " --strip " + c.strip;
  if (!c.dtype.empty()) command += " --dtype " + c.dtype;
  const nlohmann::json reference = nlohmann::json::parse(run(command));

  ckptfix::libtorch::LoadOptions options;
  options.key = c.key;
  options.strip_prefix = c.strip;
  if (c.dtype == "bfloat16") options.dtype = at::kBFloat16;
  if (c.dtype == "float16") options.dtype = at::kHalf;
  if (c.dtype == "float64") options.dtype = at::kDouble;
  const auto pairs = ckptfix::libtorch::load_state_dict(file, options);

  ASSERT_EQ(pairs.size(), reference.size());
  std::map<int, const c10::StorageImpl*> group_storage;
  std::map<const c10::StorageImpl*, int> storage_group;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [name, t] = pairs[i];
    const nlohmann::json& r = reference[i];
    SCOPED_TRACE(name);
    EXPECT_EQ(name, r["name"].get<std::string>());
    EXPECT_EQ(dtype_name(t), r["dtype"].get<std::string>());
    EXPECT_EQ(t.sizes().vec(), r["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(t.strides().vec(), r["stride"].get<std::vector<int64_t>>());
    EXPECT_EQ(t.storage_offset(), r["offset"].get<int64_t>());
    EXPECT_EQ(t.requires_grad(), r["requires_grad"].get<bool>());
    EXPECT_TRUE(t.device().is_cpu());
    EXPECT_EQ(hex(t), r["data"].get<std::string>()) << "values differ";
    // Same storage in LibTorch <=> same storage in Python.
    const int group = r["group"].get<int>();
    const c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
    EXPECT_EQ(group_storage.emplace(group, impl).first->second, impl);
    EXPECT_EQ(storage_group.emplace(impl, group).first->second, group);
  }
}

TEST_P(LoadStateDict, EqualsWhatPythonTorchLoads) {
  const Case& c = GetParam();
  // torch 1.13 ignores the byteorder record of big-endian files: its reference is their little-endian twin.
  expect_equals_python(fixture(c.file), c, fixture(c.reference.empty() ? c.file : c.reference));
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, LoadStateDict,
    ::testing::Values(Case{"plain_state_dict.pt", "", "", ""}, Case{"dataparallel.pt", "", "module.", ""},
                      Case{"compiled.pt", "", "_orig_mod.", ""}, Case{"training_dp_cuda.pt", "state_dict", "module.", ""},
                      Case{"training_dp_cuda.pt", "ema", "module.", "bfloat16"}, Case{"all_dtypes.pt", "", "", ""},
                      Case{"all_dtypes.pt", "", "", "float16"}, Case{"all_dtypes.pt", "", "", "bfloat16"},
                      Case{"views_tied.pt", "tied", "", ""}, Case{"views_tied.pt", "tied", "", "float64"},
                      Case{"legacy_training.pt", "state_dict", "module.", ""}, Case{"legacy_views.pt", "tied", "", ""},
                      Case{"cuda3.pt", "", "", ""}, Case{"legacy_cuda.pt", "", "", "float16"},
                      Case{"big_endian.pt", "", "", "", "big_endian_reference.pt"}, Case{"deflated_renamed.pt", "", "", ""},
                      Case{"nested_params.pt", "dict/inner", "", ""}, Case{"zero_d_empty.pt", "", "", ""}));

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ckptfix-torch-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

using SaveStateDict = TempDir;

TEST_F(SaveStateDict, PythonLoadsWhatLibTorchSaved) {
  for (const auto& [file, key] : std::vector<std::pair<std::string, std::string>>{
           {"all_dtypes.pt", ""}, {"views_tied.pt", "tied"}, {"nested_params.pt", "dict/inner"},
           {"training_dp_cuda.pt", "state_dict"}, {"zero_d_empty.pt", ""}}) {
    SCOPED_TRACE(file);
    ckptfix::libtorch::LoadOptions options;
    options.key = key;
    const auto pairs = ckptfix::libtorch::load_state_dict(fixture(file), options);
    ckptfix::libtorch::save_state_dict(path("saved.pt"), pairs);
    run(kPython + " " + kTests + "/torch/compare_saved.py " + path("saved.pt") + " " + fixture(file) +
        (key.empty() ? "" : " --key " + key) + " 2>&1");
  }
}

TEST_F(SaveStateDict, TensorsMadeInCppRoundTrip) {
  const at::Tensor base = at::arange(12, at::kFloat).reshape({3, 4});
  ckptfix::libtorch::save_state_dict(path("made.pt"), {{"base", base},
                                                    {"transposed", base.t()},
                                                    {"row", base[1]},
                                                    {"half", at::linspace(-2, 2, 5).to(at::kHalf)},
                                                    {"flags", at::tensor({1, 0, 1}, at::kByte).to(at::kBool)}});
  const std::string script =
      "import torch, collections, sys\n"
      "sd = torch.load(sys.argv[1])\n"
      "assert type(sd) is collections.OrderedDict and list(sd) == ['base', 'transposed', 'row', 'half', 'flags']\n"
      "b = torch.arange(12, dtype=torch.float32).reshape(3, 4)\n"
      "assert torch.equal(sd['base'], b) and torch.equal(sd['transposed'], b.t()) and torch.equal(sd['row'], b[1])\n"
      "assert sd['transposed'].stride() == (1, 4) and sd['row'].storage_offset() == 4\n"
      "def ptr(t):  # Tensor.storage() warns in torch 2.x\n"
      "    return (t.untyped_storage() if hasattr(t, 'untyped_storage') else t.storage().untyped()).data_ptr()\n"
      "assert ptr(sd['base']) == ptr(sd['row']) == ptr(sd['transposed'])\n"
      "assert torch.equal(sd['half'], torch.linspace(-2, 2, 5).half()) and sd['flags'].tolist() == [True, False, True]\n"
      "print('ok')\n";
  std::ofstream(path("check.py")) << script;
  EXPECT_EQ(run(kPython + " " + path("check.py") + " " + path("made.pt") + " 2>&1"), "ok\n");
}

// Has Python's torch save one tensor of every (non-quantized) dtype it has,
// and a view of each, into `file`; returns how many dtypes.
int save_every_dtype_in_python(const std::string& file) {
  const std::string script =
      "import torch, sys, collections\n"
      "names = sorted({str(v)[6:] for v in vars(torch).values() if isinstance(v, torch.dtype)})\n"
      "sd = collections.OrderedDict()\n"
      "quantized = {torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4}\n"
      "for i, name in enumerate(names):\n"
      "    d = getattr(torch, name)\n"
      "    if d in quantized:\n"
      "        continue\n"
      "    try:\n"
      "        size = torch.empty(0, dtype=d).element_size()\n"
      "        raw = (torch.arange(8 * size) * 37 + i).to(torch.uint8)\n"
      "        t = (raw % 2 if d == torch.bool else raw).view(d)\n"
      "        torch.save(t, '/dev/null')\n"
      "    except Exception:  # a dtype this torch cannot save\n"
      "        continue\n"
      "    sd[name] = t\n"
      "    sd[name + '_view'] = t[3:]\n"
      "torch.save(sd, sys.argv[1])\n"
      "print(len(sd) // 2)\n";
  const std::string maker = file + ".make.py";
  std::ofstream(maker) << script;
  return std::stoi(run(kPython + " " + maker + " " + file + " 2>/dev/null"));
}

using LoadEveryDtype = TempDir;

// What load_state_dict gives equals what Python's torch loads.
TEST_F(LoadEveryDtype, PythonSavedEveryDtypeItHas) {
  const int dtypes = save_every_dtype_in_python(path("every.pt"));
  std::cout << "Python's torch saved " << dtypes << " dtypes\n";
  EXPECT_GE(dtypes, 12);
  expect_equals_python(path("every.pt"), Case{}, path("every.pt"));
}

// What a state dict may hold (issue 50): sparse tensors come back sparse, with
// Python's values; a module's extra state that is Python data is left out
// (no LibTorch module has one), one that is a tensor comes back.
TEST_F(LoadEveryDtype, SparseTensorsAndExtraStates) {
  const std::string script =
      "import torch, sys, json, collections\n"
      "dense = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])\n"
      "sd = collections.OrderedDict([('w', torch.arange(6.0).reshape(2, 3)), ('coo', dense.to_sparse()),\n"
      "    ('csr', dense.to_sparse_csr()), ('0._extra_state', {'scale': 0.5}), ('1._extra_state', torch.ones(2))])\n"
      "torch.save(sd, sys.argv[1])\n"
      "print(json.dumps(dense.reshape(-1).tolist()))\n";
  std::ofstream(path("make.py")) << script;
  const nlohmann::json dense = nlohmann::json::parse(run(kPython + " " + path("make.py") + " " + path("sparse.pt") +
                                                         " 2>/dev/null"));
  const auto pairs = ckptfix::libtorch::load_state_dict(path("sparse.pt"));
  std::vector<std::string> names;
  for (const auto& [name, t] : pairs) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"w", "coo", "csr", "1._extra_state"}));
  ASSERT_EQ(pairs.size(), 4u);
  EXPECT_EQ(pairs[1].second.layout(), at::kSparse);
  EXPECT_EQ(pairs[2].second.layout(), at::kSparseCsr);
  for (size_t i : {size_t{1}, size_t{2}}) {
    SCOPED_TRACE(pairs[i].first);
    const at::Tensor values = pairs[i].second.to_dense().reshape({-1}).contiguous();
    ASSERT_EQ(values.numel(), static_cast<int64_t>(dense.size()));
    for (int64_t k = 0; k < values.numel(); ++k) EXPECT_EQ(values[k].item<float>(), dense[k].get<float>());
  }
  EXPECT_TRUE(at::equal(pairs[3].second, at::ones({2})));
}

// Deterministic bytes in a tensor of any dtype (bool: 0 or 1).
at::Tensor patterned(c10::ScalarType type, int64_t numel, int seed) {
  at::Tensor t = at::empty({numel}, at::TensorOptions().dtype(type));
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (int64_t i = 0; i < numel * static_cast<int64_t>(t.element_size()); ++i) {
    p[i] = static_cast<unsigned char>(i * 37 + seed * 11 + 5);
    if (type == at::kBool) p[i] &= 1;
  }
  return t;
}

// LibTorch tensors of every dtype this LibTorch has, saved: LibTorch reads
// them back, and Python's default torch.load (weights_only=True since 2.6)
// returns the same tensors, wherever that torch has the dtype and can read
// how torch.save writes it (torch 1.13 has no _rebuild_tensor_v3).
TEST_F(SaveStateDict, EveryDtypeThisLibTorchHas) {
  std::vector<std::pair<std::string, at::Tensor>> typed, untyped;
  int seed = 0;
  for (const c10::ScalarType type : creatable_scalar_types()) {
    const std::string name = python_name(type);
    const at::Tensor t = patterned(type, 8, ++seed);
    if (name[0] == '?') {  // no checkpoint can hold it: torch.save refuses it too
      EXPECT_THROW(ckptfix::libtorch::save_state_dict(path("refused.pt"), {{name, t}}), Error) << name;
      continue;
    }
    auto& group = has_typed_storage(name) ? typed : untyped;
    group.emplace_back(name, t);
    group.emplace_back(name + "_view", t.narrow(0, 3, 4));  // offset 3, same storage
  }
  std::cout << "saved " << typed.size() / 2 << " dtypes with a typed storage, " << untyped.size() / 2
            << " as UntypedStorage\n";
  const std::string script =
      "import torch, sys, json\n"
      "try:\n"
      "    sd = torch.load(sys.argv[1])\n"
      "except Exception as e:\n"
      "    print(json.dumps({'version': torch.__version__, 'error': type(e).__name__ + ': ' + str(e)}))\n"
      "    sys.exit(0)\n"
      "out, groups = [], {}\n"
      "for k, t in sd.items():\n"
      "    u = t.untyped_storage() if hasattr(t, 'untyped_storage') else t.storage().untyped()\n"
      "    n = t.element_size()\n"
      "    b = torch.empty(0, dtype=torch.uint8).set_(u, t.storage_offset() * n, (t.numel() * n,), (1,))\n"
      "    out.append([k, str(t.dtype)[6:], list(t.shape), list(t.stride()), t.storage_offset(),\n"
      "                b.numpy().tobytes().hex(), groups.setdefault(u._cdata, len(groups))])\n"
      "print(json.dumps({'version': torch.__version__, 'tensors': out}))\n";
  std::ofstream(path("judge.py")) << script;
  for (const auto* group : {&typed, &untyped}) {
    if (group->empty()) continue;
    const std::string file = path(group == &typed ? "typed.pt" : "untyped.pt");
    SCOPED_TRACE(file);
    ckptfix::libtorch::save_state_dict(file, *group);
    const auto back = ckptfix::libtorch::load_state_dict(file);
    ASSERT_EQ(back.size(), group->size());
    for (size_t i = 0; i < back.size(); ++i) {
      const at::Tensor& want = (*group)[i].second;
      const at::Tensor& got = back[i].second;
      EXPECT_EQ(back[i].first, (*group)[i].first);
      EXPECT_EQ(got.scalar_type(), want.scalar_type()) << back[i].first;
      EXPECT_EQ(got.sizes(), want.sizes()) << back[i].first;
      EXPECT_EQ(got.storage_offset(), want.storage_offset()) << back[i].first;
      EXPECT_EQ(hex(got), hex(want)) << back[i].first;
    }
    const nlohmann::json judged = nlohmann::json::parse(run(kPython + " " + path("judge.py") + " " + file + " 2>/dev/null"));
    const std::string version = judged["version"].get<std::string>();
    if (judged.contains("error")) {
      // What torch 1.13 shows: it cannot rebuild an UntypedStorage tensor.
      EXPECT_TRUE(group == &untyped && version.rfind("1.", 0) == 0) << version << ": " << judged["error"];
      continue;
    }
    const auto& tensors = judged["tensors"];
    ASSERT_EQ(tensors.size(), group->size()) << version;
    for (size_t i = 0; i < group->size(); ++i) {
      const auto& [name, t] = (*group)[i];
      const auto& r = tensors[i];
      SCOPED_TRACE(name);
      EXPECT_EQ(r[0].get<std::string>(), name);
      EXPECT_EQ(r[1].get<std::string>(), dtype_name(t));
      EXPECT_EQ(r[2].get<std::vector<int64_t>>(), t.sizes().vec());
      EXPECT_EQ(r[3].get<std::vector<int64_t>>(), t.strides().vec());
      EXPECT_EQ(r[4].get<int64_t>(), t.storage_offset());
      EXPECT_EQ(r[5].get<std::string>(), hex(t));
      EXPECT_EQ(r[6].get<int>(), static_cast<int>(i / 2)) << "a view must share its base's storage";
    }
  }
}

// The TinyCNN of fixtures/make_fixtures.py, in LibTorch.
struct TinyCNN : ::torch::nn::Module {
  TinyCNN(int64_t out = 3)
      : conv(register_module("conv", ::torch::nn::Conv2d(::torch::nn::Conv2dOptions(1, 2, 3)))),
        bn(register_module("bn", ::torch::nn::BatchNorm2d(2))),
        fc(register_module("fc", ::torch::nn::Linear(8, out))) {}
  ::torch::nn::Conv2d conv;
  ::torch::nn::BatchNorm2d bn;
  ::torch::nn::Linear fc;
};

using LoadInto = TempDir;

TEST_F(LoadInto, CopiesByNameAndIsStrictLikePython) {
  TinyCNN model;
  ckptfix::libtorch::load_into(model, fixture("plain_state_dict.pt"));
  const auto pairs = ckptfix::libtorch::load_state_dict(fixture("plain_state_dict.pt"));
  for (const auto& [name, t] : pairs) {
    const auto params = model.named_parameters();
    const auto buffers = model.named_buffers();
    const at::Tensor& target = params.contains(name) ? params[name] : buffers[name];
    EXPECT_TRUE(at::equal(target, t)) << name;
  }
  TinyCNN wrapped;
  try {
    ckptfix::libtorch::load_into(wrapped, fixture("dataparallel.pt"));
    ADD_FAILURE() << "strict load of a DataParallel state dict must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConflict);
    const std::string what = e.what();
    EXPECT_NE(what.find("Missing key(s) in state_dict: \"conv.weight\""), std::string::npos) << what;
    EXPECT_NE(what.find("Unexpected key(s) in state_dict: \"module.conv.weight\""), std::string::npos) << what;
  }
  ckptfix::libtorch::LoadOptions strip;
  strip.strip_prefix = "module.";
  const ckptfix::libtorch::IncompatibleKeys none = ckptfix::libtorch::load_into(wrapped, fixture("dataparallel.pt"), strip);
  EXPECT_TRUE(none.missing_keys.empty() && none.unexpected_keys.empty());
  // Not strict: nothing matches, nothing is copied, and what did not match
  // comes back, as Python's load_state_dict(strict=False) returns it.
  const ckptfix::libtorch::IncompatibleKeys left =
      ckptfix::libtorch::load_into(wrapped, fixture("dataparallel.pt"), {}, /*strict=*/false);
  const std::vector<std::string> module_keys = {"conv.weight", "conv.bias", "bn.weight", "bn.bias", "fc.weight",
                                                "fc.bias", "bn.running_mean", "bn.running_var",
                                                "bn.num_batches_tracked"};
  std::vector<std::string> missing = left.missing_keys, expected_missing = module_keys;
  std::sort(missing.begin(), missing.end());
  std::sort(expected_missing.begin(), expected_missing.end());
  EXPECT_EQ(missing, expected_missing);
  EXPECT_EQ(left.unexpected_keys.size(), module_keys.size());
  for (const std::string& k : left.unexpected_keys) EXPECT_EQ(k.rfind("module.", 0), 0u) << k;
  TinyCNN other(4);
  try {
    ckptfix::libtorch::load_into(other, fixture("plain_state_dict.pt"));
    ADD_FAILURE() << "a shape mismatch must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("size mismatch for fc.weight: copying a param with shape [3, 8] from "
                                         "checkpoint, the shape in current model is [4, 8]"),
              std::string::npos)
        << e.what();
  }
}

// LoadOptions::like (issue 51): the keys fitted to the module by fix --like's rules.
TEST_F(LoadInto, FitsTheKeysToTheModuleItIsGiven) {
  TinyCNN model;
  ckptfix::libtorch::LoadOptions like;
  like.like = &model;
  // module.conv.weight -> conv.weight: loads with strict, every value the file's.
  ckptfix::libtorch::load_into(model, fixture("dataparallel.pt"), like);
  const auto saved = ckptfix::libtorch::load_state_dict(fixture("dataparallel.pt"));
  const auto params = model.named_parameters();
  const auto buffers = model.named_buffers();
  for (const auto& [name, t] : saved) {
    ASSERT_EQ(name.rfind("module.", 0), 0u) << name;
    const std::string bare = name.substr(7);
    const at::Tensor& target = params.contains(bare) ? params[bare] : buffers[bare];
    EXPECT_TRUE(at::equal(target, t)) << name;
  }
  // In the module's order, whatever the file's.
  const auto fitted = ckptfix::libtorch::load_state_dict(fixture("dataparallel.pt"), like);
  const auto expected = ckptfix::libtorch::model_reference(model);
  ASSERT_EQ(fitted.size(), expected.entries.size());
  for (size_t i = 0; i < fitted.size(); ++i) EXPECT_EQ(fitted[i].first, expected.entries[i].key);
  // A training file with two state dicts that fit alike: refused naming both; a key picks one.
  try {
    ckptfix::libtorch::load_state_dict(fixture("training_dp_cuda.pt"), like);
    ADD_FAILURE() << "two state dicts that fit alike must be refused";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("state_dict"), std::string::npos) << what;
    EXPECT_NE(what.find("ema"), std::string::npos) << what;
  }
  ckptfix::libtorch::LoadOptions training = like;
  training.key = "state_dict";
  ckptfix::libtorch::load_into(model, fixture("training_dp_cuda.pt"), training);
  // Another class count: refused in torch's words (the lines as details);
  // drop_mismatched leaves the head out, for strict=false.
  TinyCNN other(4);
  ckptfix::libtorch::LoadOptions other_like;
  other_like.like = &other;
  try {
    ckptfix::libtorch::load_into(other, fixture("dataparallel.pt"), other_like);
    ADD_FAILURE() << "a shape mismatch must be refused";
  } catch (const Error& e) {
    bool said = false;
    for (const std::string& line : e.details()) {
      said = said || line.find("size mismatch for fc.weight: copying a param with shape torch.Size([3, 8]) from "
                               "checkpoint, the shape in current model is torch.Size([4, 8]).") != std::string::npos;
    }
    EXPECT_TRUE(said) << e.what();
  }
  other_like.fit.drop_mismatched = true;
  const at::Tensor head_before = other.fc->weight.clone();
  ckptfix::libtorch::load_into(other, fixture("dataparallel.pt"), other_like, /*strict=*/false);
  EXPECT_TRUE(at::equal(other.fc->weight, head_before));
  for (const auto& [name, t] : saved) {
    if (name == "module.conv.weight") EXPECT_TRUE(at::equal(other.conv->weight, t));
  }
  // `like` strips what it must: a strip_prefix beside it is a usage error.
  ckptfix::libtorch::LoadOptions both = like;
  both.strip_prefix = "module.";
  EXPECT_THROW(ckptfix::libtorch::load_state_dict(fixture("dataparallel.pt"), both), Error);
}

TEST(Errors, AreCkptfixErrorsWithContext) {
  try {
    ckptfix::libtorch::load_state_dict(fixture("training.pt"));
    ADD_FAILURE() << "several state dicts: the key must be chosen";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("several state dicts ('state_dict', 'ema')"), std::string::npos) << e.what();
  }
  try {
    ckptfix::libtorch::load_state_dict(fixture("malicious_zip.pt"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsafe);
  }
  ckptfix::libtorch::LoadOptions bad;
  bad.map_location = "gpu:7";
  EXPECT_THROW(ckptfix::libtorch::load_state_dict(fixture("plain_state_dict.pt"), bad), Error);
  ckptfix::libtorch::LoadOptions cuda;
  cuda.map_location = "cuda";
  if (::torch::cuda::is_available()) {
    EXPECT_TRUE(ckptfix::libtorch::load_state_dict(fixture("cuda0.pt"), cuda).front().second.is_cuda());
  } else {
    // One line in torch.load's words, naming the file, the saved location
    // and the way out; not LibTorch's dispatcher dump.
    try {
      ckptfix::libtorch::load_state_dict(fixture("cuda0.pt"), cuda);
      ADD_FAILURE() << "no CUDA in this LibTorch";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kGpu) << e.what();
      EXPECT_EQ(e.file(), fixture("cuda0.pt"));
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_LT(what.size(), 400u) << what;
      EXPECT_NE(what.find("Attempting to deserialize object on a CUDA device"), std::string::npos) << what;
      EXPECT_NE(what.find("saved on 'cuda:0'"), std::string::npos) << what;
      EXPECT_NE(what.find("map_location = \"cpu\""), std::string::npos) << what;
    }
  }
  // A device index past the machine's devices (cuda:3 here, with none or one).
  ckptfix::libtorch::LoadOptions cuda3;
  cuda3.map_location = "cuda:3";
  if (!::torch::cuda::is_available() || ::torch::cuda::device_count() <= 3) {
    try {
      ckptfix::libtorch::load_state_dict(fixture("cuda3.pt"), cuda3);
      ADD_FAILURE() << "cuda:3 is not on this machine";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kGpu) << e.what();
      EXPECT_NE(std::string(e.what()).find("saved on 'cuda:3'"), std::string::npos) << e.what();
    }
  }
}

// load_into takes a module holder as Python takes a module: torch::nn::Sequential,
// a TORCH_MODULE of one's own.
TEST_F(LoadInto, TakesAModuleHolder) {
  ::torch::nn::Sequential seq(::torch::nn::Linear(3, 2));
  const std::string file = path("seq.pt");
  run(kPython + " -c \"import torch, sys; torch.save({'0.weight': torch.ones(2, 3), '0.bias': torch.zeros(2)}, "
                "sys.argv[1])\" " + file);
  const ckptfix::libtorch::IncompatibleKeys left = ckptfix::libtorch::load_into(seq, file);
  EXPECT_TRUE(left.missing_keys.empty() && left.unexpected_keys.empty());
  EXPECT_TRUE(at::equal(seq->named_parameters()["0.weight"], at::ones({2, 3})));
}

int64_t rss_anon_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8));
  }
  return -1;
}

using ZeroCopy = TempDir;

TEST_F(ZeroCopy, NoSecondCopyOfALargeTensor) {
  run(kPython + " -c \"import torch, sys; torch.save({'big': torch.rand(64 << 20)}, sys.argv[1])\" " + path("big.pt"));
  const int64_t before = rss_anon_kib();
  ckptfix::libtorch::LoadOptions mapped;
  mapped.zero_copy = true;  // on request: the default copies, as torch.load(mmap=False)
  {
    const auto pairs = ckptfix::libtorch::load_state_dict(path("big.pt"), mapped);
    const double sum = pairs[0].second.sum().item<double>();  // touches every page
    EXPECT_GT(sum, 0);
    const int64_t grown = rss_anon_kib() - before;
    std::cout << "zero-copy load of 256 MiB: anonymous resident memory grew by " << grown / 1024 << " MiB\n";
    EXPECT_LT(grown, 32 * 1024) << "a 256 MiB tensor was copied";
  }
  // Control: a cast must make a (128 MiB) copy, and the measure sees it.
  ckptfix::libtorch::LoadOptions cast = mapped;
  cast.dtype = at::kBFloat16;
  const int64_t start = rss_anon_kib();
  const auto pairs = ckptfix::libtorch::load_state_dict(path("big.pt"), cast);
  EXPECT_GT(rss_anon_kib() - start, 100 * 1024);
}

using ForLibTorch = TempDir;

TEST_F(ForLibTorch, TorchsOwnPickleLoadReadsTheOutput) {
  save_every_dtype_in_python(path("every.pt"));  // every dtype the judge's torch has
  for (const auto& [file, key] : std::vector<std::pair<std::string, std::string>>{
           {fixture("plain_state_dict.pt"), ""}, {fixture("training_dp_cuda.pt"), "state_dict"},
           {fixture("legacy_cuda.pt"), ""}, {fixture("all_dtypes.pt"), ""}, {fixture("views_tied.pt"), "tied"},
           {fixture("nested_params.pt"), "dict/inner"}, {path("every.pt"), ""}}) {
    SCOPED_TRACE(file);
    std::ifstream original(file, std::ios::binary);
    const std::vector<char> original_bytes((std::istreambuf_iterator<char>(original)), std::istreambuf_iterator<char>());
    if (file == fixture("plain_state_dict.pt")) {
      // The gap this fills: LibTorch cannot read what Python's state_dict() saves.
      EXPECT_THROW(::torch::jit::pickle_load(original_bytes).toGenericDict(), c10::Error);
    }
    run(std::string(CKPTFIX_BIN) + " convert --for-libtorch -q " + (key.empty() ? "" : "--key " + key + " ") +
        file + " -o " + path("lt.pt") + " --force");
    std::ifstream in(path("lt.pt"), std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const c10::Dict<c10::IValue, c10::IValue> dict = ::torch::jit::pickle_load(bytes).toGenericDict();
    ckptfix::libtorch::LoadOptions options;
    options.key = key;
    const auto expected = ckptfix::libtorch::load_state_dict(file, options);
    ASSERT_EQ(dict.size(), expected.size());
    for (const auto& [name, t] : expected) {
      const at::Tensor got = dict.at(name).toTensor();
      EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
      EXPECT_EQ(got.sizes(), t.sizes()) << name;
      EXPECT_EQ(got.strides(), t.strides()) << name;
      EXPECT_EQ(hex(got), hex(t)) << name;
      EXPECT_TRUE(got.device().is_cpu()) << name;
    }
  }
}

}  // namespace

// The staging path every load onto a GPU takes (issue 36), run on the CPU:
// the same copy loop with plain buffers, as a load with zero_copy off takes it.

TEST(DeviceStaging, EveryByteLandsWhateverTheBufferSize) {
  std::vector<std::byte> source(10007);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::byte>((i * 131 + 7) & 0xFF);
  for (size_t buffer : {size_t{1}, size_t{3}, size_t{64}, size_t{4096}, size_t{10007}, size_t{1} << 20}) {
    ckptfix::libtorch::DeviceStaging staging(at::Device(at::kCPU), buffer);
    at::Tensor target = at::zeros({static_cast<int64_t>(source.size())}, at::kByte);
    std::vector<uint64_t> offsets;
    staging.copy(target, [&](uint64_t offset, std::span<std::byte> out) {
      offsets.push_back(offset);
      std::memcpy(out.data(), source.data() + offset, out.size());
    });
    staging.finish();
    EXPECT_EQ(std::memcmp(target.data_ptr(), source.data(), source.size()), 0) << "buffer " << buffer;
    EXPECT_EQ(offsets.size(), (source.size() + buffer - 1) / buffer) << "buffer " << buffer;
    EXPECT_EQ(staging.bytes(), source.size());
  }
}

TEST(DeviceStaging, AReadErrorPartWayEndsTheCopyCleanly) {
  ckptfix::libtorch::DeviceStaging staging(at::Device(at::kCPU), 100);
  at::Tensor target = at::zeros({1000}, at::kByte);
  int calls = 0;
  EXPECT_THROW(staging.copy(target, [&](uint64_t offset, std::span<std::byte> out) {
                 if (++calls == 4) throw Error(ErrorKind::kIo, "read failed at " + std::to_string(offset));
                 std::memset(out.data(), 1, out.size());
               }),
               Error);
  EXPECT_EQ(calls, 4);
  EXPECT_EQ(target.sum().item<int64_t>(), 300);  // the three buffers before the error, nothing after
  // The staging is usable again, and its destructor waits for nothing left.
  at::Tensor again = at::zeros({10}, at::kByte);
  staging.copy(again, [](uint64_t, std::span<std::byte> out) { std::memset(out.data(), 2, out.size()); });
  EXPECT_EQ(again.sum().item<int64_t>(), 20);
}

// The threads that read a buffer's share of a storage (read_threads.h).
TEST(ReadThreads, EveryItemRunsOnceOnSeveralThreads) {
  ckptfix::libtorch::ReadThreads threads(4);
  for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
    std::vector<std::atomic<int>> calls(count);
    std::mutex mutex;
    std::set<std::thread::id> ids;
    std::atomic<size_t> seen{0};
    threads.run(count, [&](size_t i) {
      ++calls[i];
      {
        std::lock_guard<std::mutex> lock(mutex);
        ids.insert(std::this_thread::get_id());
        seen = ids.size();
      }
      // Wait (a while, on a loaded machine) for another thread to take an
      // item: one thread running all 7 on a busy CI machine is no failure
      // of the pool, but a pool that never starts a second one is.
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (count >= 7 && seen.load() < 2 && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    for (size_t i = 0; i < count; ++i) EXPECT_EQ(calls[i].load(), 1) << "item " << i << " of " << count;
    if (count >= 7) EXPECT_GT(ids.size(), 1u) << count << " items ran on one thread";
    EXPECT_LE(ids.size(), 4u);
  }
}

TEST(ReadThreads, TheFirstErrorEndsTheTaskAndTheNextTaskRuns) {
  ckptfix::libtorch::ReadThreads threads(3);
  std::atomic<int> started{0};
  try {
    threads.run(10000, [&](size_t i) {
      ++started;
      if (i == 5) throw Error(ErrorKind::kIo, "item 5 failed");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "item 5 failed");
  }
  EXPECT_LT(started.load(), 10000) << "items after the error were not skipped";
  std::atomic<int> calls{0};
  threads.run(50, [&](size_t) { ++calls; });
  EXPECT_EQ(calls.load(), 50);
}

// Storages of several 1 MiB pieces, read on several threads into buffers
// that cut them anywhere, give the bytes Python saved (what the zero-copy
// load maps).
TEST_F(LoadEveryDtype, StoragesOfManyPiecesReadOnSeveralThreads) {
  std::ofstream(path("make.py")) << "import torch, sys\n"
                                    "g = torch.Generator().manual_seed(5)\n"
                                    "torch.save({'big': torch.randn(917507, generator=g),\n"
                                    "            'odd': torch.randint(0, 256, ((3 << 20) + 3,), dtype=torch.uint8, generator=g),\n"
                                    "            'small': torch.arange(5.0)}, sys.argv[1])\n";
  const std::string made = run(kPython + " " + path("make.py") + " " + path("big.pt") + " 2>&1");
  ASSERT_TRUE(std::filesystem::exists(path("big.pt"))) << made;
  const int saved_threads = at::get_num_threads();
  at::set_num_threads(4);
  const auto expected = ckptfix::libtorch::load_state_dict(path("big.pt"), {});
  for (size_t buffer : {size_t{4096}, (size_t{3} << 19) + 1, size_t{64} << 20}) {
    ckptfix::libtorch::LoadOptions staged;
    staged.zero_copy = false;
    staged.staging_bytes = buffer;
    const auto got = ckptfix::libtorch::load_state_dict(path("big.pt"), staged);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, expected[i].first);
      EXPECT_TRUE(got[i].second.equal(expected[i].second)) << got[i].first << " buffer " << buffer;
    }
  }
  at::set_num_threads(saved_threads);
}

// A load through the staging buffers gives what the zero-copy load gives:
// bytes, dtypes, shapes, strides, offsets, sharing, casts; big-endian,
// legacy (odd offsets), deflated and views; buffers of 1 byte to more than the file.
TEST(LoadStateDict, StagedCopiesEqualTheZeroCopyLoad) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"views_tied.pt", ""}, {"training_dp_cuda.pt", "state_dict"}, {"big_endian.pt", ""},
      {"legacy_views.pt", ""}, {"deflated_renamed.pt", ""}, {"all_dtypes.pt", ""}};
  for (const auto& [file, key] : cases) {
    ckptfix::libtorch::LoadOptions plain;
    plain.key = key;
    plain.zero_copy = true;
    std::vector<std::pair<std::string, at::Tensor>> expected;
    try {
      expected = ckptfix::libtorch::load_state_dict(fixture(file), plain);
    } catch (const Error& e) {
      ADD_FAILURE() << file << ": " << e.what();
      continue;
    }
    for (size_t buffer : {size_t{1}, size_t{3}, size_t{64}, size_t{1} << 20, size_t{1} << 30}) {
      for (bool cast : {false, true}) {
        ckptfix::libtorch::LoadOptions staged = plain;
        staged.zero_copy = false;
        staged.staging_bytes = buffer;
        if (cast) staged.dtype = at::kBFloat16;
        const auto got = ckptfix::libtorch::load_state_dict(fixture(file), staged);
        const std::string what = file + " buffer " + std::to_string(buffer) + (cast ? " bf16" : "");
        ASSERT_EQ(got.size(), expected.size()) << what;
        std::map<const void*, const void*> storages;  // expected storage -> staged storage
        for (size_t i = 0; i < got.size(); ++i) {
          const at::Tensor& want = expected[i].second;
          const at::Tensor& have = got[i].second;
          EXPECT_EQ(got[i].first, expected[i].first) << what;
          EXPECT_EQ(have.sizes(), want.sizes()) << what << " " << got[i].first;
          EXPECT_EQ(have.strides(), want.strides()) << what << " " << got[i].first;
          EXPECT_EQ(have.storage_offset(), want.storage_offset()) << what << " " << got[i].first;
          const bool castable = cast && (want.scalar_type() == at::kFloat || want.scalar_type() == at::kDouble ||
                                         want.scalar_type() == at::kHalf || want.scalar_type() == at::kBFloat16);
          const at::Tensor reference = castable ? want.to(at::kBFloat16) : want;
          EXPECT_EQ(have.scalar_type(), reference.scalar_type()) << what << " " << got[i].first;
          EXPECT_EQ(hex(have), hex(reference)) << what << " " << got[i].first;
          EXPECT_FALSE(have.storage().data() == want.storage().data()) << what << ": not a copy";
          const auto [it, added] = storages.emplace(want.storage().data(), have.storage().data());
          EXPECT_EQ(it->second, have.storage().data()) << what << " " << got[i].first << ": sharing differs";
        }
      }
    }
  }
}

TEST(LoadStateDict, OntoTheGpuEqualsTheCpuLoad) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "GPU test skipped: no CUDA device is usable here";
  for (size_t buffer : {size_t{3}, size_t{4096}, size_t{64} << 20}) {
    ckptfix::libtorch::LoadOptions cpu, gpu;
    cpu.key = gpu.key = "state_dict";
    gpu.map_location = "cuda";
    gpu.staging_bytes = buffer;
    const auto want = ckptfix::libtorch::load_state_dict(fixture("training_dp_cuda.pt"), cpu);
    const auto have = ckptfix::libtorch::load_state_dict(fixture("training_dp_cuda.pt"), gpu);
    ASSERT_EQ(want.size(), have.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(have[i].second.is_cuda());
      EXPECT_EQ(hex(have[i].second.cpu()), hex(want[i].second)) << have[i].first << " buffer " << buffer;
    }
  }
}

// ckptfix/torch.h keeps the bridge's names before issue 52 for one release.
TEST(Namespace, TheOldNamesStillWorkDeprecated) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ckptfix::torch::LoadOptions options;
  options.key = "state_dict";
  options.strip_prefix = "module.";
  const auto pairs = ckptfix::torch::load_state_dict(fixture("training_dp_cuda.pt"), options);
#pragma GCC diagnostic pop
  EXPECT_EQ(pairs.size(), 9u);
  EXPECT_EQ(pairs.front().first.rfind("module.", 0), std::string::npos);
}

// ckptfix::torch judged by Python torch: load_state_dict against reference
// data that /usr/bin/python3 produces at test time (tests/torch/reference.py),
// save_state_dict against torch.load (tests/torch/compare_saved.py),
// load_into with a LibTorch module, zero-copy loading measured in resident
// anonymous memory, and convert --for-libtorch against LibTorch's own
// torch::jit::pickle_load.
#include <gtest/gtest.h>

#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/cuda.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ckptfix/error.h"
#include "ckptfix/torch.h"

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

std::string dtype_name(const at::Tensor& t) {
  static const std::map<c10::ScalarType, std::string> names = {
      {at::kHalf, "float16"},   {at::kBFloat16, "bfloat16"}, {at::kFloat, "float32"},       {at::kDouble, "float64"},
      {at::kChar, "int8"},      {at::kByte, "uint8"},        {at::kShort, "int16"},         {at::kInt, "int32"},
      {at::kLong, "int64"},     {at::kBool, "bool"},         {at::kComplexFloat, "complex64"},
      {at::kComplexDouble, "complex128"}};
  return names.at(t.scalar_type());
}

struct Case {
  std::string file, key, strip, dtype;
  std::string reference;  // the file Python loads for the reference, when it cannot load `file` itself
};

std::ostream& operator<<(std::ostream& os, const Case& c) {
  return os << c.file << " key='" << c.key << "' strip='" << c.strip << "' dtype='" << c.dtype << "'";
}

class LoadStateDict : public ::testing::TestWithParam<Case> {};

TEST_P(LoadStateDict, EqualsWhatPythonTorchLoads) {
  const Case& c = GetParam();
  // torch 1.13 ignores the byteorder record of big-endian files: its reference is their little-endian twin.
  std::string command = kPython + " " + kTests + "/torch/reference.py " + fixture(c.reference.empty() ? c.file : c.reference);
  if (!c.key.empty()) command += " --key " + c.key;
  if (!c.strip.empty()) command += " --strip " + c.strip;
  if (!c.dtype.empty()) command += " --dtype " + c.dtype;
  const nlohmann::json reference = nlohmann::json::parse(run(command));

  ckptfix::torch::LoadOptions options;
  options.key = c.key;
  options.strip_prefix = c.strip;
  if (c.dtype == "bfloat16") options.dtype = at::kBFloat16;
  if (c.dtype == "float16") options.dtype = at::kHalf;
  if (c.dtype == "float64") options.dtype = at::kDouble;
  const auto pairs = ckptfix::torch::load_state_dict(fixture(c.file), options);

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
    ckptfix::torch::LoadOptions options;
    options.key = key;
    const auto pairs = ckptfix::torch::load_state_dict(fixture(file), options);
    ckptfix::torch::save_state_dict(path("saved.pt"), pairs);
    run(kPython + " " + kTests + "/torch/compare_saved.py " + path("saved.pt") + " " + fixture(file) +
        (key.empty() ? "" : " --key " + key) + " 2>&1");
  }
}

TEST_F(SaveStateDict, TensorsMadeInCppRoundTrip) {
  const at::Tensor base = at::arange(12, at::kFloat).reshape({3, 4});
  ckptfix::torch::save_state_dict(path("made.pt"), {{"base", base},
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
      "assert sd['base'].storage().data_ptr() == sd['row'].storage().data_ptr() == sd['transposed'].storage().data_ptr()\n"
      "assert torch.equal(sd['half'], torch.linspace(-2, 2, 5).half()) and sd['flags'].tolist() == [True, False, True]\n"
      "print('ok')\n";
  std::ofstream(path("check.py")) << script;
  EXPECT_EQ(run(kPython + " " + path("check.py") + " " + path("made.pt") + " 2>&1"), "ok\n");
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
  ckptfix::torch::load_into(model, fixture("plain_state_dict.pt"));
  const auto pairs = ckptfix::torch::load_state_dict(fixture("plain_state_dict.pt"));
  for (const auto& [name, t] : pairs) {
    const auto params = model.named_parameters();
    const auto buffers = model.named_buffers();
    const at::Tensor& target = params.contains(name) ? params[name] : buffers[name];
    EXPECT_TRUE(at::equal(target, t)) << name;
  }
  TinyCNN wrapped;
  try {
    ckptfix::torch::load_into(wrapped, fixture("dataparallel.pt"));
    ADD_FAILURE() << "strict load of a DataParallel state dict must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConflict);
    const std::string what = e.what();
    EXPECT_NE(what.find("Missing key(s) in state_dict: \"conv.weight\""), std::string::npos) << what;
    EXPECT_NE(what.find("Unexpected key(s) in state_dict: \"module.conv.weight\""), std::string::npos) << what;
  }
  ckptfix::torch::LoadOptions strip;
  strip.strip_prefix = "module.";
  ckptfix::torch::load_into(wrapped, fixture("dataparallel.pt"), strip);
  ckptfix::torch::load_into(wrapped, fixture("dataparallel.pt"), {}, /*strict=*/false);  // nothing matches: fine
  TinyCNN other(4);
  try {
    ckptfix::torch::load_into(other, fixture("plain_state_dict.pt"));
    ADD_FAILURE() << "a shape mismatch must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("size mismatch for fc.weight: copying a param with shape [3, 8] from "
                                         "checkpoint, the shape in current model is [4, 8]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Errors, AreCkptfixErrorsWithContext) {
  try {
    ckptfix::torch::load_state_dict(fixture("training.pt"));
    ADD_FAILURE() << "several state dicts: the key must be chosen";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("several state dicts ('state_dict', 'ema')"), std::string::npos) << e.what();
  }
  try {
    ckptfix::torch::load_state_dict(fixture("malicious_zip.pt"));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsafe);
  }
  ckptfix::torch::LoadOptions bad;
  bad.map_location = "gpu:7";
  EXPECT_THROW(ckptfix::torch::load_state_dict(fixture("plain_state_dict.pt"), bad), Error);
  ckptfix::torch::LoadOptions cuda;
  cuda.map_location = "cuda";
  if (::torch::cuda::is_available()) {
    EXPECT_TRUE(ckptfix::torch::load_state_dict(fixture("cuda0.pt"), cuda).front().second.is_cuda());
  } else {
    try {
      ckptfix::torch::load_state_dict(fixture("cuda0.pt"), cuda);
      ADD_FAILURE() << "no CUDA in this LibTorch";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kGpu) << e.what();
      EXPECT_EQ(e.file(), fixture("cuda0.pt"));
    }
  }
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
  {
    const auto pairs = ckptfix::torch::load_state_dict(path("big.pt"));
    const double sum = pairs[0].second.sum().item<double>();  // touches every page
    EXPECT_GT(sum, 0);
    const int64_t grown = rss_anon_kib() - before;
    std::cout << "zero-copy load of 256 MiB: anonymous resident memory grew by " << grown / 1024 << " MiB\n";
    EXPECT_LT(grown, 32 * 1024) << "a 256 MiB tensor was copied";
  }
  // Control: a cast must make a (128 MiB) copy, and the measure sees it.
  ckptfix::torch::LoadOptions cast;
  cast.dtype = at::kBFloat16;
  const int64_t start = rss_anon_kib();
  const auto pairs = ckptfix::torch::load_state_dict(path("big.pt"), cast);
  EXPECT_GT(rss_anon_kib() - start, 100 * 1024);
}

using ForLibTorch = TempDir;

TEST_F(ForLibTorch, TorchsOwnPickleLoadReadsTheOutput) {
  for (const auto& [file, key] : std::vector<std::pair<std::string, std::string>>{
           {"plain_state_dict.pt", ""}, {"training_dp_cuda.pt", "state_dict"}, {"legacy_cuda.pt", ""},
           {"all_dtypes.pt", ""}, {"views_tied.pt", "tied"}, {"nested_params.pt", "dict/inner"}}) {
    SCOPED_TRACE(file);
    std::ifstream original(fixture(file), std::ios::binary);
    const std::vector<char> original_bytes((std::istreambuf_iterator<char>(original)), std::istreambuf_iterator<char>());
    if (file == "plain_state_dict.pt") {
      // The gap this fills: LibTorch cannot read what Python's state_dict() saves.
      EXPECT_THROW(::torch::jit::pickle_load(original_bytes).toGenericDict(), c10::Error);
    }
    run(std::string(CKPTFIX_BIN) + " convert --for-libtorch -q " + (key.empty() ? "" : "--key " + key + " ") +
        fixture(file) + " -o " + path("lt.pt") + " --force");
    std::ifstream in(path("lt.pt"), std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const c10::Dict<c10::IValue, c10::IValue> dict = ::torch::jit::pickle_load(bytes).toGenericDict();
    ckptfix::torch::LoadOptions options;
    options.key = key;
    const auto expected = ckptfix::torch::load_state_dict(fixture(file), options);
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

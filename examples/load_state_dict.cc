// Loads a Python-saved checkpoint's state dict into LibTorch, without
// Python: a CUDA-saved DataParallel training checkpoint's nested state dict,
// onto the CPU, with the "module." prefix stripped and, optionally, cast to
// bfloat16; then into a LibTorch model, and saved back for Python; with
// --forward, the model's output on a fixed input is saved too.
//
//   load_state_dict CHECKPOINT OUT [--key state_dict] [--strip module.] [--bf16] [--forward OUT2]
#include <ckptfix/error.h>
#include <ckptfix/libtorch.h>
#include <torch/torch.h>

#include <cstring>
#include <iostream>

// The model the checkpoint was trained with (fixtures/make_fixtures.py).
struct TinyCNNImpl : torch::nn::Module {
  TinyCNNImpl()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(2))),
        fc(register_module("fc", torch::nn::Linear(8, 3))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(bn(conv(x)).flatten(1)); }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};
TORCH_MODULE(TinyCNN);  // a holder, like torch::nn::Linear: TinyCNN model; model->forward(x)

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: load_state_dict CHECKPOINT OUT [--key K] [--strip P] [--bf16] [--forward OUT2]\n";
    return 2;
  }
  ckptfix::libtorch::LoadOptions options;  // map_location defaults to "cpu"
  const char* forward_out = nullptr;
  for (int i = 3; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--key") && i + 1 < argc) options.key = argv[++i];
    else if (!std::strcmp(argv[i], "--strip") && i + 1 < argc) options.strip_prefix = argv[++i];
    else if (!std::strcmp(argv[i], "--bf16")) options.dtype = at::kBFloat16;
    else if (!std::strcmp(argv[i], "--forward") && i + 1 < argc) forward_out = argv[++i];
  }
  try {
    const auto state = ckptfix::libtorch::load_state_dict(argv[1], options);
    for (const auto& [name, tensor] : state) {
      std::cout << name << ": " << tensor.scalar_type() << " " << tensor.sizes() << " on " << tensor.device() << "\n";
    }
    TinyCNN model;
    if (options.dtype) model->to(*options.dtype);
    // strict, as Python's load_state_dict: every key must match. Without it,
    // what did not match comes back (missing_keys, unexpected_keys).
    const ckptfix::libtorch::IncompatibleKeys left = ckptfix::libtorch::load_into(model, argv[1], options);
    std::cout << "loaded into TinyCNN (strict; " << left.missing_keys.size() << " missing, "
              << left.unexpected_keys.size() << " unexpected)\n";
    ckptfix::libtorch::save_state_dict(argv[2], state);
    std::cout << "saved " << argv[2] << "\n";
    if (forward_out != nullptr) {
      // The model in eval mode on a fixed input, saved for Python to compare.
      model->eval();
      torch::NoGradGuard no_grad;
      const torch::Tensor x = torch::arange(32, torch::kFloat32).reshape({2, 1, 4, 4}).div(10);
      const torch::Tensor y = model->forward(options.dtype ? x.to(*options.dtype) : x);
      ckptfix::libtorch::save_state_dict(forward_out, {{"input", x}, {"output", y}});
      std::cout << "forward output saved to " << forward_out << "\n";
    }
    return 0;
  } catch (const ckptfix::Error& e) {
    std::cerr << "load_state_dict: error: " << e.what() << "\n";
    return 1;
  }
}

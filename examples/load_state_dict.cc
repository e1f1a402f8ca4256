// Loads a Python-saved checkpoint's state dict into LibTorch, without
// Python: a CUDA-saved DataParallel training checkpoint's nested state dict,
// onto the CPU, with the "module." prefix stripped and, optionally, cast to
// bfloat16; then into a LibTorch model, and saved back for Python.
//
//   load_state_dict CHECKPOINT OUT [--key state_dict] [--strip module.] [--bf16]
#include <ckptfix/error.h>
#include <ckptfix/torch.h>
#include <torch/torch.h>

#include <cstring>
#include <iostream>

// The model the checkpoint was trained with.
struct TinyCNN : torch::nn::Module {
  TinyCNN()
      : conv(register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 2, 3)))),
        bn(register_module("bn", torch::nn::BatchNorm2d(2))),
        fc(register_module("fc", torch::nn::Linear(8, 3))) {}
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d bn;
  torch::nn::Linear fc;
};

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: load_state_dict CHECKPOINT OUT [--key K] [--strip P] [--bf16]\n";
    return 2;
  }
  ckptfix::torch::LoadOptions options;  // map_location defaults to "cpu"
  for (int i = 3; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--key") && i + 1 < argc) options.key = argv[++i];
    else if (!std::strcmp(argv[i], "--strip") && i + 1 < argc) options.strip_prefix = argv[++i];
    else if (!std::strcmp(argv[i], "--bf16")) options.dtype = at::kBFloat16;
  }
  try {
    const auto state = ckptfix::torch::load_state_dict(argv[1], options);
    for (const auto& [name, tensor] : state) {
      std::cout << name << ": " << tensor.scalar_type() << " " << tensor.sizes() << " on " << tensor.device() << "\n";
    }
    TinyCNN model;
    if (options.dtype) model.to(*options.dtype);
    ckptfix::torch::load_into(model, argv[1], options);  // strict: every key must match
    std::cout << "loaded into TinyCNN (strict)\n";
    ckptfix::torch::save_state_dict(argv[2], state);
    std::cout << "saved " << argv[2] << "\n";
    return 0;
  } catch (const ckptfix::Error& e) {
    std::cerr << "load_state_dict: error: " << e.what() << "\n";
    return 1;
  }
}

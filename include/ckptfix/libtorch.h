// ckptfix::libtorch: Python-saved checkpoints straight into LibTorch.
//
// LibTorch programs cannot load a state dict saved from Python:
// torch::jit::pickle_load turns the OrderedDict that model.state_dict()
// returns into None, and torch::load expects a TorchScript archive. These
// functions read torch.save files (zip or legacy, from any device) with
// ckptfix's reader, which never runs pickle code, and build at::Tensors.
//
// The target ckptfix::libtorch: built with ckptfix when CMake finds LibTorch,
// or, from the release's C++ package, compiled in the consumer's build
// against its own LibTorch (docs/library.md). Its namespace was
// ckptfix::torch before issue 52, which made `torch::` ambiguous after
// `using namespace ckptfix;` (ckptfix/torch.h keeps the old name, deprecated).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "ckptfix/fit.h"

namespace torch::nn {
class Module;  ///< LibTorch's module (declared here so that this header needs only ATen)
template <typename Contained>
class ModuleHolder;  ///< what TORCH_MODULE(Name) makes: torch::nn::Linear, torch::nn::Sequential, ...
}  // namespace torch::nn

namespace ckptfix::libtorch {

/// How to load.
struct LoadOptions {
  /// Where tensors are created: "cpu", "cuda", "cuda:N" (whatever the file says).
  std::string map_location = "cpu";
  /// Removed from the start of every key that has it, e.g. "module."; empty: keep keys.
  std::string strip_prefix;
  /// '/'-separated path of a nested state dict, e.g. "state_dict"; empty: the
  /// root if it is a state dict, else the only state dict in the file.
  std::string key;
  /// Cast floating tensors (float16/bfloat16/float32/float64) to this type,
  /// with Tensor::to on the target device (so bit-identical to it); tensors
  /// sharing a storage stay shared.
  std::optional<c10::ScalarType> dtype;
  /// On the CPU, let tensors point into a private mapping of the file where
  /// it allows (no copy). Off by default, as torch.load(mmap=False): tensors
  /// over a mapping see the file cut under them when it is replaced in place
  /// (torch::save to the same path truncates it first), where copies do not.
  bool zero_copy = false;
  /// Onto a device (map_location other than "cpu"), and on the CPU without
  /// zero_copy, the bytes go through two staging buffers of this size,
  /// pinned for a GPU: the reading (on several threads) of one overlaps the
  /// asynchronous copy of the other to the device.
  size_t staging_bytes = size_t{64} << 20;
  /// Fit the keys to this module's state dict (model_reference(*like)) by
  /// the rules of `ckptfix fix --like` (ckptfix/fit.h), in its order, so
  /// that load_into(*like, ...) with strict takes them; what no rule places
  /// throws Error(kConflict) with torch's own lines as its details(),
  /// unless `fit` allows it. Null: the keys as saved. Not with strip_prefix.
  const ::torch::nn::Module* like = nullptr;
  /// With `like`: renames, drops, allow_missing, drop_unexpected, drop_mismatched.
  FitOptions fit;
};

/// What `module`'s load_state_dict expects: its parameters and buffers, per
/// submodule in registration order (its own, then its children's), with
/// their shapes and dtypes; named "module.name()" in messages.
ModelReference model_reference(const ::torch::nn::Module& module);

/// The (name, tensor) pairs of a state dict, in the file's order. Tensors
/// keep their saved dtype, shape, strides and storage offset; tensors that
/// share a storage in the file share one here. Without a cast, on the CPU,
/// tensors whose data is stored little-endian and aligned in the file point
/// into a private (copy-on-write) mapping of it, kept alive by the tensors:
/// no copy is made. Onto a GPU, each storage is copied once, from the file
/// through pinned staging buffers, asynchronously (LoadOptions::staging_bytes);
/// the tensors are ready for work queued on the device's current stream.
/// Sparse tensors come back sparse (at::sparse_coo_tensor,
/// at::sparse_compressed_tensor over their loaded parts). A module's extra
/// state (a key ending in `_extra_state`) comes back when it is a tensor;
/// when it is Python data (a dict, bytes, ...), which no LibTorch module
/// has, it is left out. Throws ckptfix::Error naming the file and key.
std::vector<std::pair<std::string, at::Tensor>> load_state_dict(const std::filesystem::path& file,
                                                                 const LoadOptions& options = {});

/// What load_into leaves undone, as Python's load_state_dict returns it
/// (torch.nn.modules.module._IncompatibleKeys): the module's keys the file
/// lacks, and the file's keys the module lacks. Both empty: every key matched.
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

/// Copies the state dict into the module's parameters and buffers by name.
/// With `strict`, fails (nothing copied) listing missing and unexpected keys,
/// like Python's load_state_dict; shapes must match in any case. Without it,
/// copies what matches and returns what did not.
IncompatibleKeys load_into(::torch::nn::Module& module, const std::filesystem::path& file,
                           const LoadOptions& options = {}, bool strict = true);

/// The same into the module a holder holds (`torch::nn::Sequential model;`,
/// or a TORCH_MODULE of one's own): load_into(model, ...) as in Python.
template <typename Contained>
IncompatibleKeys load_into(::torch::nn::ModuleHolder<Contained>& holder, const std::filesystem::path& file,
                           const LoadOptions& options = {}, bool strict = true) {
  return load_into(static_cast<::torch::nn::Module&>(*holder), file, options, strict);
}

/// Writes a checkpoint that Python's torch.load returns as an OrderedDict of
/// the same tensors (dtypes, shapes, strides, offsets, shared storages, the
/// tensors' devices as saved locations). Atomic and verified like every
/// ckptfix write; `overwrite` replaces an existing file.
void save_state_dict(const std::filesystem::path& file, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     bool overwrite = true);

}  // namespace ckptfix::libtorch

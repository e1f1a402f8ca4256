// load_into: a state dict into a torch::nn::Module's parameters and buffers.
#include <torch/nn/module.h>

#include <map>

#include "ckptfix/error.h"
#include "ckptfix/libtorch.h"
#include "libtorch/libtorch_errors.h"
#include "libtorch/scalar_types.h"

namespace ckptfix::libtorch {
namespace {

std::string shape_text(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string quoted(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", \"" : "\"") + keys[i] + "\"";
  return s;
}


// The module's own state-dict order, as Python's state_dict() has it: per
// submodule in registration order, its parameters, then its buffers; each
// name once, with its tensor.
void state_dict_order(const ::torch::nn::Module& module, std::vector<std::string>& order,
                      std::map<std::string, at::Tensor>& targets) {
  auto add = [&](const std::string& prefix, const ::torch::nn::Module& m) {
    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      if (targets.emplace(prefix + p.key(), p.value()).second) order.push_back(prefix + p.key());
    }
    for (const auto& b : m.named_buffers(/*recurse=*/false)) {
      if (targets.emplace(prefix + b.key(), b.value()).second) order.push_back(prefix + b.key());
    }
  };
  add("", module);  // the module itself (named_modules can include it only when it is held by a shared_ptr)
  for (const auto& item : module.named_modules("", /*include_self=*/false)) add(item.key() + ".", *item.value());
}

}  // namespace

ModelReference model_reference(const ::torch::nn::Module& module) {
  std::vector<std::string> order;
  std::map<std::string, at::Tensor> targets;
  state_dict_order(module, order, targets);
  ModelReference reference;
  reference.name = module.name();
  for (const std::string& key : order) {
    const at::Tensor& t = targets.at(key);
    ExpectedEntry e;
    e.key = key;
    if (t.defined()) {
      e.shape.assign(t.sizes().begin(), t.sizes().end());
      e.dtype = from_scalar_type(t.scalar_type()).value_or(DType::kUntyped);
    }
    reference.entries.push_back(std::move(e));
  }
  return reference;
}

IncompatibleKeys load_into(::torch::nn::Module& module, const std::filesystem::path& file, const LoadOptions& options,
                           bool strict) {
  const auto pairs = load_state_dict(file, options);
  std::vector<std::string> order;
  std::map<std::string, at::Tensor> targets;
  state_dict_order(module, order, targets);

  std::vector<std::string> unexpected, missing, mismatched;
  std::map<std::string, bool> found;
  for (const auto& [key, tensor] : pairs) {
    auto it = targets.find(key);
    if (it == targets.end()) {
      unexpected.push_back(key);
      continue;
    }
    found[key] = true;
    if (it->second.sizes() != tensor.sizes()) {
      mismatched.push_back("size mismatch for " + key + ": copying a param with shape " + shape_text(tensor.sizes()) +
                           " from checkpoint, the shape in current model is " + shape_text(it->second.sizes()));
    }
  }
  for (const std::string& key : order) {
    if (!found.count(key)) missing.push_back(key);
  }
  std::string problems;
  if (strict && !missing.empty()) problems += "Missing key(s) in state_dict: " + quoted(missing) + ". ";
  if (strict && !unexpected.empty()) problems += "Unexpected key(s) in state_dict: " + quoted(unexpected) + ". ";
  for (const std::string& m : mismatched) problems += m + ". ";
  if (!problems.empty()) {
    problems.pop_back();
    throw Error(ErrorKind::kConflict, "Error(s) in loading state_dict for " + module.name() + ": " + problems)
        .in_file(file.string());
  }
  try {
    at::NoGradGuard no_grad;
    for (const auto& [key, tensor] : pairs) {
      auto it = targets.find(key);
      if (it != targets.end()) it->second.copy_(tensor);
    }
  } catch (const c10::Error& e) {
    throw from_libtorch(e).in_file(file.string());
  }
  return {std::move(missing), std::move(unexpected)};
}

}  // namespace ckptfix::libtorch

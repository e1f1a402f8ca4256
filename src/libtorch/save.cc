// save_state_dict: LibTorch tensors written as a Python state dict.
#include <unordered_map>

#include "ckptfix/builder.h"
#include "ckptfix/error.h"
#include "ckptfix/save.h"
#include "ckptfix/libtorch.h"
#include "libtorch/libtorch_errors.h"
#include "libtorch/scalar_types.h"

namespace ckptfix::libtorch {

void save_state_dict(const std::filesystem::path& file, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                     bool overwrite) {
  std::vector<StorageSpec> storages;
  std::vector<TensorSpec> specs;
  std::vector<at::Tensor> host;  // CPU copies of device storages, alive until written
  std::unordered_map<const c10::StorageImpl*, size_t> index;
  try {
    for (const auto& [key, t] : tensors) {
      auto fail = [&](const std::string& what) { return Error(ErrorKind::kInvalidArgument, what).in_file(file.string()).at("key '" + key + "'"); };
      if (!t.defined()) throw fail("undefined tensor");
      if (t.is_quantized() || t.is_sparse() || t.is_mkldnn()) throw fail("only dense, non-quantized tensors can be saved");
      const std::optional<DType> dtype = from_scalar_type(t.scalar_type());
      if (!dtype) throw fail(std::string("dtype ") + c10::toString(t.scalar_type()) + " cannot be saved");
      const c10::Storage& storage = t.storage();
      auto [it, inserted] = index.emplace(storage.unsafeGetStorageImpl(), storages.size());
      if (inserted) {
        StorageSpec spec;
        spec.nbytes = storage.nbytes();
        spec.dtype = *dtype;
        spec.location = t.device().is_cpu() ? "cpu" : t.device().str();
        if (t.device().is_cpu()) {
          spec.data = static_cast<const std::byte*>(storage.data());
        } else {  // the whole storage, so views keep their offsets
          const int64_t numel = static_cast<int64_t>(spec.nbytes / t.element_size());
          host.push_back(at::empty({0}, t.options()).set_(storage, 0, {numel}, {1}).cpu());
          spec.data = static_cast<const std::byte*>(host.back().data_ptr());
        }
        storages.push_back(spec);
      } else if (storages[it->second].dtype != *dtype) {
        throw fail("shares its storage with a tensor of another dtype, which torch.save cannot express");
      }
      TensorSpec spec;
      spec.key = key;
      spec.storage = it->second;
      spec.storage_offset = t.storage_offset();
      spec.shape.assign(t.sizes().begin(), t.sizes().end());
      spec.stride.assign(t.strides().begin(), t.strides().end());
      spec.requires_grad = t.requires_grad();
      specs.push_back(std::move(spec));
    }
  } catch (const c10::Error& e) {
    throw from_libtorch(e).in_file(file.string());
  }
  Checkpoint checkpoint = make_state_dict_checkpoint(storages, specs);
  SaveOptions options;
  options.overwrite = overwrite;
  save(checkpoint, file, options);
}

}  // namespace ckptfix::libtorch

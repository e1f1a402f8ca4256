// Building a checkpoint in memory: a state dict of tensors whose bytes the
// caller holds, written with ckptfix's verified writer (save.h) so that
// Python's torch.load returns an OrderedDict of the same tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// A run of elements in memory; tensors view it.
struct StorageSpec {
  const std::byte* data = nullptr;  ///< kept alive by the caller until the checkpoint is written
  uint64_t nbytes = 0;
  DType dtype = DType::kFloat32;  ///< the element type of the bytes
  std::string location = "cpu";  ///< the saved location tag ("cpu", "cuda:0", ...)
};

/// One state-dict entry.
struct TensorSpec {
  std::string key;  ///< the state-dict key
  size_t storage = 0;  ///< index into the StorageSpec list
  int64_t storage_offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
  bool requires_grad = false;  ///< torch.nn.Parameter-style requires_grad
};

/// An OrderedDict state dict as the newest torch.save writes it (per tensor
/// _rebuild_tensor_v2 with a typed storage, or for the dtypes without one
/// _rebuild_tensor_v3 with an UntypedStorage and the dtype; tensors of one
/// storage share it; the newest torch's records). Throws
/// Error(kInvalidArgument) for views outside their storage or duplicate keys.
Checkpoint make_state_dict_checkpoint(const std::vector<StorageSpec>& storages, const std::vector<TensorSpec>& tensors);

}  // namespace ckptfix

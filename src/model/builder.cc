#include "ckptfix/builder.h"

#include <unordered_set>

#include "ckptfix/error.h"
#include "error_boundary.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"

namespace ckptfix {

namespace {

Checkpoint build_state_dict(const std::vector<StorageSpec>& storages, const std::vector<TensorSpec>& tensors) {
  auto impl = std::make_unique<CheckpointImpl>();
  impl->file = InputFile::from_memory({}, "<memory>");
  impl->format = CheckpointFormat::kZip;
  Value* root = begin_built_state_dict(*impl);
  ValueGraph& g = impl->graph;

  for (size_t i = 0; i < storages.size(); ++i) {
    const StorageSpec& spec = storages[i];
    if (spec.dtype == DType::kUntyped) throw Error(ErrorKind::kInvalidArgument, "a storage needs a dtype");
    Storage s;
    s.key = std::to_string(i);
    s.dtype = spec.dtype;
    // As torch.save: a typed storage class where the dtype has one, else an
    // UntypedStorage (numel in bytes) and the dtype as _rebuild_tensor_v3's argument.
    s.untyped = !storage_class_name(spec.dtype);
    s.numel = s.untyped ? spec.nbytes : spec.nbytes / element_size(spec.dtype);
    s.nbytes = spec.nbytes;
    s.location = spec.location;
    s.source.encoding = StorageSource::Encoding::kMemory;
    s.source.memory = spec.data;
    s.source.record = "storage " + s.key + " (memory)";
    impl->storages.push_back(std::move(s));
  }

  std::unordered_set<std::string> keys;
  for (const TensorSpec& t : tensors) {
    if (t.storage >= storages.size()) throw Error(ErrorKind::kInvalidArgument, "tensor '" + t.key + "' names a storage that does not exist");
    if (!keys.insert(t.key).second) throw Error(ErrorKind::kInvalidArgument, "key '" + t.key + "' appears twice");
    Value* call = g.make(ValueKind::kObject);
    make_rebuild_call(g, *call, impl->storages, static_cast<int32_t>(t.storage), t.storage_offset, t.shape, t.stride,
                      t.requires_grad, root->callable());
    root->entries().emplace_back(g.make_str(t.key), call);
  }
  impl->root = root;
  build_tensor_table(*impl);
  note_state_dict_globals(*impl);
  Checkpoint checkpoint = CheckpointAccess::adopt(std::move(impl));
  try {
    validate_tensor_views(checkpoint);
  } catch (Error& e) {
    throw Error(ErrorKind::kInvalidArgument, e.message()).at(e.location());
  }
  return checkpoint;
}

}  // namespace

Checkpoint make_state_dict_checkpoint(const std::vector<StorageSpec>& storages, const std::vector<TensorSpec>& tensors) {
  return error_boundary("", [&] { return build_state_dict(storages, tensors); });
}

}  // namespace ckptfix

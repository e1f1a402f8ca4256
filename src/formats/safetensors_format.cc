// safetensors files as checkpoints: the header (safetensors/header.h) becomes
// what `safetensors.torch.load_file` returns, an OrderedDict of tensors in
// header order, each over its own storage whose bytes stay in the file.
// Written as torch zip, it is the state dict torch.save would write for it.
#include <algorithm>

#include "ckptfix/error.h"
#include "formats/registry.h"
#include "model/torch_objects.h"
#include "safetensors/header.h"

namespace ckptfix {

bool is_safetensors(std::span<const std::byte> file) { return looks_like_safetensors(file); }

void read_safetensors_checkpoint(CheckpointImpl& impl) {
  SafetensorsHeader header = read_safetensors_header(*impl.file, impl.salvage != nullptr);
  if (impl.salvage != nullptr) {
    // Salvage: the tensors whose bytes the file still holds whole.
    impl.salvage->found_by = "safetensors header";
    std::erase_if(header.entries, [&](const SafetensorsEntry& e) {
      if (header.data_start + e.end <= impl.file->size()) return false;
      impl.salvage->lost.push_back({e.name, "tensor '" + e.name + "'", e.end - e.begin,
                                    "cut at offset " + hex_offset(impl.file->size()) + " (the file ends there)"});
      return true;
    });
  }
  impl.format = CheckpointFormat::kSafetensors;
  Value* root = begin_built_state_dict(impl);
  impl.safetensors_metadata = header.metadata;
  if (header.entries.size() > impl.limits.max_storages) {
    throw Error(ErrorKind::kLimit, "the header lists " + std::to_string(header.entries.size()) +
                                       " tensors, more than the limit of " + std::to_string(impl.limits.max_storages));
  }
  ValueGraph& g = impl.graph;
  for (size_t i = 0; i < header.entries.size(); ++i) {
    const SafetensorsEntry& e = header.entries[i];
    Storage s;
    s.key = std::to_string(i);
    s.dtype = e.dtype;
    s.untyped = !storage_class_name(e.dtype);
    s.nbytes = e.end - e.begin;
    s.numel = s.untyped ? s.nbytes : s.nbytes / element_size(e.dtype);
    s.location = "cpu";
    s.source.encoding = StorageSource::Encoding::kStored;
    s.source.offset = header.data_start + e.begin;
    s.source.length = s.nbytes;
    s.source.record = "tensor '" + e.name + "'";
    impl.storages.push_back(std::move(s));
  }
  for (size_t i = 0; i < header.entries.size(); ++i) {
    const SafetensorsEntry& e = header.entries[i];
    std::vector<int64_t> shape = e.shape;
    if (!shape.empty()) shape.back() /= safetensors_values_per_element(e.dtype);
    Value* call = g.make(ValueKind::kObject);
    make_rebuild_call(g, *call, impl.storages, static_cast<int32_t>(i), 0, shape, contiguous_strides(shape), false,
                      root->callable());
    root->entries().emplace_back(g.make_str(e.name), call);
  }
  impl.root = root;
  build_tensor_table(impl);
  note_state_dict_globals(impl);
}

}  // namespace ckptfix

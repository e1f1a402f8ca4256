// Rewriting a checkpoint so LibTorch's own torch::jit::pickle_load reads it.
//
// LibTorch's unpickler (torch/csrc/jit/serialization/unpickler.cpp) turns
// every collections.OrderedDict into None (it expects one only as a tensor's
// empty backward hooks), so model.state_dict() comes back as None ("Expected
// GenericDict but got None"); it knows no Parameter, no argparse or numpy
// globals, cannot place storages on devices it was not built for, and reads
// LONG1 only with 8 bytes. What it does read is what torch.save(dict(sd))
// writes for CPU tensors: a plain dict of _rebuild_tensor_v2 calls. It has
// no _rebuild_tensor_v3 and no UntypedStorage: the dtypes torch 2.x saves
// that way (float8, uint16, complex32, ...) become _rebuild_tensor_v2 calls
// on a storage the writer names as LibTorch's pickler does
// ("torch.Float8_e4m3fnStorage", counted in elements).
#include <map>
#include <set>

#include "ckptfix/state_dict.h"
#include "model/checkpoint_impl.h"
#include "passes/passes_internal.h"

namespace ckptfix {

void make_libtorch_state_dict(Checkpoint& checkpoint, const PassOptions& options, PassReport& report) {
  const std::vector<StateDictEntry> entries = select_state_dict(checkpoint, options.keys.empty() ? "" : options.keys[0]);
  ValueGraph& graph = impl_of(checkpoint).graph;
  Value* dict = graph.make(ValueKind::kDict);
  std::set<int32_t> storages;  // ordered: the report lists moves in storage order
  for (const StateDictEntry& e : entries) {
    Tensor& t = impl_of(checkpoint).tensors[e.tensor];
    if (t.parameter) {  // a plain tensor in place of the Parameter wrapping it
      t.value = t.rebuild;
      t.parameter = false;
      const Value* requires_grad = t.rebuild->args()->items.size() > 4 ? t.rebuild->args()->items[4] : nullptr;
      t.requires_grad = requires_grad != nullptr && requires_grad->kind == ValueKind::kBool && requires_grad->boolean;
    }
    if (t.dtype_arg != nullptr) {  // _rebuild_tensor_v3(storage, ..., hooks, dtype[, metadata])
      std::vector<Value*> args(t.rebuild->args()->items.begin(), t.rebuild->args()->items.begin() + 6);
      t.rebuild->callable() = graph.make_global("torch._utils", "_rebuild_tensor_v2");
      t.rebuild->args() = graph.make_tuple(std::move(args));
      t.dtype_arg = nullptr;
      Storage& s = impl_of(checkpoint).storages[static_cast<size_t>(t.storage)];
      s.untyped = false;
      s.numel = s.nbytes / element_size(s.dtype);
    }
    dict->entries().emplace_back(graph.make_str(e.key), t.value);
    storages.insert(t.storage);
  }
  impl_of(checkpoint).root = dict;
  std::map<std::string, uint64_t> moves;  // "from -> cpu": storages, as the remap pass counts them
  for (int32_t index : storages) {
    Storage& s = impl_of(checkpoint).storages[static_cast<size_t>(index)];
    if (s.location == "cpu") continue;
    ++moves[s.location + " -> cpu"];
    s.location = "cpu";
    ++report.storages_retagged;
  }
  report.retagged.assign(moves.begin(), moves.end());
  report.for_libtorch = true;
}

}  // namespace ckptfix

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

#include "ckptfix/error.h"
#include "ckptfix/state_dict.h"
#include "model/checkpoint_impl.h"
#include "model/torch_objects.h"
#include "passes/passes_internal.h"

namespace ckptfix {

void make_libtorch_state_dict(Checkpoint& checkpoint, const PassOptions& options, PassReport& report) {
  const std::vector<StateDictEntry> entries = select_state_dict(checkpoint, options.keys.empty() ? "" : options.keys[0]);
  ValueGraph& graph = impl_of(checkpoint).graph;
  Value* dict = graph.make(ValueKind::kDict);
  std::set<int32_t> storages;  // ordered: the report lists moves in storage order
  std::vector<std::string> left_out;
  for (const StateDictEntry& e : entries) {
    if (e.kind == StateDictEntry::Kind::kData) {  // Python data, which no LibTorch module has
      left_out.push_back(e.key);
      continue;
    }
    if (e.kind == StateDictEntry::Kind::kSparseTensor) {
      throw Error(ErrorKind::kUnsupported, "a " + e.sparse.layout +
                                               " tensor, which LibTorch's pickle_load cannot read; load it with "
                                               "ckptfix::libtorch::load_state_dict instead")
          .at("key '" + e.key + "'");
    }
    Tensor& t = impl_of(checkpoint).tensors[e.tensor];
    if (t.kind == TensorKind::kMeta) {
      throw Error(ErrorKind::kUnsupported, "a meta tensor (no data), which LibTorch's pickle_load cannot read")
          .at("key '" + e.key + "'");
    }
    if (t.from_type) {  // LibTorch has no _rebuild_from_type_v2, and no Python attributes
      Value* plain = graph.make(ValueKind::kObject);
      plain->callable() = const_cast<Value*>(&rebuild_function(t));
      plain->args() = graph.make_tuple(rebuild_arguments(t));
      if (t.value == t.rebuild) t.value = plain;
      t.rebuild = plain;
      impl_of(checkpoint).tensor_by_value[plain] = e.tensor;
      t.python_attributes = false;
      report.warnings.push_back("the Python attributes of tensor '" + e.key + "' are not written (LibTorch has none)");
    }
    if (t.parameter) {  // a plain tensor in place of the Parameter wrapping it (its attributes go with it)
      t.value = t.rebuild;
      t.parameter = false;
      t.python_attributes = false;
      const auto& args = rebuild_arguments(t);
      const Value* requires_grad = args.size() > 4 ? args[4] : nullptr;
      t.requires_grad = requires_grad != nullptr && requires_grad->kind == ValueKind::kBool && requires_grad->boolean;
    }
    if (t.dtype_arg != nullptr) {  // _rebuild_tensor_v3(storage, ..., hooks, dtype[, metadata])
      const auto& v3 = rebuild_arguments(t);
      std::vector<Value*> args(v3.begin(), v3.begin() + 6);
      set_rebuild(graph, t, graph.make_global("torch._utils", "_rebuild_tensor_v2"), std::move(args));
      t.dtype_arg = nullptr;
      Storage& s = impl_of(checkpoint).storages[static_cast<size_t>(t.storage)];
      s.untyped = false;
      s.numel = s.nbytes / element_size(s.dtype);
    }
    dict->entries().emplace_back(graph.make_str(e.key), t.value);
    storages.insert(t.storage);
  }
  impl_of(checkpoint).root = dict;
  if (!left_out.empty()) {
    std::string keys;
    for (const std::string& k : left_out) keys += (keys.empty() ? "'" : ", '") + k + "'";
    report.warnings.push_back("left out " + std::to_string(left_out.size()) + " module extra state" +
                              (left_out.size() == 1 ? "" : "s") + " that " + (left_out.size() == 1 ? "is" : "are") +
                              " Python data, which no LibTorch module has: " + keys);
  }
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

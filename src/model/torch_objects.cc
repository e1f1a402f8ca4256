#include "model/torch_objects.h"

#include <algorithm>
#include <unordered_map>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "model/graph_walk.h"

namespace ckptfix {
namespace {

Error corrupt(std::string message) { return Error(ErrorKind::kCorrupt, std::move(message)); }

bool as_int(const Value* v, int64_t& out) {
  if (v == nullptr || v->kind != ValueKind::kInt) return false;
  out = v->integer;
  return true;
}

bool as_int_tuple(const Value* v, std::vector<int64_t>& out) {
  if (v == nullptr || (v->kind != ValueKind::kTuple && v->kind != ValueKind::kList)) return false;
  out.clear();
  for (const Value* item : v->items) {
    int64_t i;
    if (!as_int(item, i)) return false;
    out.push_back(i);
  }
  return true;
}

bool as_bool(const Value* v, bool& out) {
  if (v == nullptr) return false;
  if (v->kind == ValueKind::kBool) {
    out = v->boolean;
    return true;
  }
  if (v->kind == ValueKind::kInt) {  // protocol 0 files may spell bools as ints
    out = v->integer != 0;
    return true;
  }
  return false;
}

// _rebuild_meta_tensor_no_storage(dtype, size, stride, requires_grad): a
// tensor on the meta device, no data.
bool parse_meta(const Value& arguments, Value& v, Tensor& t) {
  const auto& a = arguments.items;
  auto bad = [](const std::string& what) { return corrupt("malformed _rebuild_meta_tensor_no_storage call: " + what); };
  if (a.size() < 4) throw bad("expected 4 arguments, found " + std::to_string(a.size()));
  std::optional<DType> dtype;
  if (a[0]->kind == ValueKind::kGlobal && a[0]->text == "torch") dtype = dtype_from_torch_attribute(a[0]->name());
  if (!dtype) throw bad("dtype argument is not a torch dtype");
  t.value = &v;
  t.rebuild = &v;
  t.kind = TensorKind::kMeta;
  t.dtype = *dtype;
  t.dtype_arg = a[0];
  if (!as_int_tuple(a[1], t.shape)) throw bad("size is not a tuple of integers");
  if (!as_int_tuple(a[2], t.stride)) throw bad("stride is not a tuple of integers");
  if (!as_bool(a[3], t.requires_grad)) throw bad("requires_grad is not a bool");
  return true;
}

// A dense or quantized rebuild call, parsed. Returns false if `v` is not one.
// A tensor with Python attributes is a call of
// torch._tensor._rebuild_from_type_v2(func, type, args, state), which
// calls func(*args), makes it a `type` and sets the attributes `state`
// holds (torch >= 2.0's Tensor.__reduce_ex__; torch 1.13 drops them on load).
bool parse_rebuild(CheckpointImpl& impl, Value& v, Tensor& t) {
  if (v.kind != ValueKind::kObject || v.callable() == nullptr || v.callable()->kind != ValueKind::kGlobal) return false;
  const Value* function = v.callable();
  const Value* arguments = v.args();
  if (v.is_call_to("torch._tensor", "_rebuild_from_type_v2")) {
    const auto& outer = v.args()->items;
    if (outer.size() != 4 || outer[0]->kind != ValueKind::kGlobal || outer[1]->kind != ValueKind::kGlobal) return false;
    if (outer[2]->kind != ValueKind::kTuple) throw corrupt("malformed _rebuild_from_type_v2 call: its arguments are not a tuple");
    function = outer[0];
    arguments = outer[2];
    t.from_type = true;
    t.python_attributes = true;
  }
  if (function->text != "torch._utils") return false;
  const std::string& fn = function->name();
  if (fn == "_rebuild_meta_tensor_no_storage") return parse_meta(*arguments, v, t);
  size_t min_args = 0;
  if (fn == "_rebuild_tensor") {
    min_args = 4;
  } else if (fn == "_rebuild_tensor_v2") {
    min_args = 6;
  } else if (fn == "_rebuild_tensor_v3") {
    min_args = 7;
  } else if (fn == "_rebuild_qtensor") {
    min_args = 7;
  } else {
    return false;
  }
  const auto& a = arguments->items;
  auto bad = [&](const std::string& what) {
    return corrupt("malformed " + fn + " call: " + what);
  };
  if (a.size() < min_args) throw bad("expected at least " + std::to_string(min_args) + " arguments, found " + std::to_string(a.size()));
  if (a[0]->kind != ValueKind::kPersistentId || a[0]->storage < 0) throw bad("first argument is not a storage");
  t.value = &v;
  t.rebuild = &v;
  t.storage = a[0]->storage;
  if (!as_int(a[1], t.storage_offset)) throw bad("storage offset is not an integer");
  if (!as_int_tuple(a[2], t.shape)) throw bad("size is not a tuple of integers");
  if (!as_int_tuple(a[3], t.stride)) throw bad("stride is not a tuple of integers");
  const Storage& s = impl.storages[static_cast<size_t>(t.storage)];
  t.dtype = s.dtype;
  if (fn == "_rebuild_tensor_v2" || fn == "_rebuild_tensor_v3") {
    if (!as_bool(a[4], t.requires_grad)) throw bad("requires_grad is not a bool");
  }
  if (fn == "_rebuild_qtensor") {
    t.kind = TensorKind::kQuantized;
    if (!as_bool(a[5], t.requires_grad)) throw bad("requires_grad is not a bool");
  }
  if (fn == "_rebuild_tensor_v3") {
    const Value* d = a[6];
    std::optional<DType> dtype;
    if (d->kind == ValueKind::kGlobal && d->text == "torch") dtype = dtype_from_torch_attribute(d->name());
    if (!dtype) throw bad("dtype argument is not a torch dtype");
    t.dtype = *dtype;
    t.dtype_arg = a[6];
  }
  return true;
}

}  // namespace

const Value& rebuild_function(const Tensor& t) {
  return t.from_type ? *t.rebuild->args()->items[0] : *t.rebuild->callable();
}

const std::vector<Value*>& rebuild_arguments(const Tensor& t) {
  return t.from_type ? t.rebuild->args()->items[2]->items : t.rebuild->args()->items;
}

void set_rebuild(ValueGraph& graph, Tensor& t, Value* function, std::vector<Value*> arguments) {
  if (!t.from_type) {
    t.rebuild->callable() = function;
    t.rebuild->args() = graph.make_tuple(std::move(arguments));
    return;
  }
  const auto& outer = t.rebuild->args()->items;  // (func, type, args, state)
  t.rebuild->args() = graph.make_tuple({function, outer[1], graph.make_tuple(std::move(arguments)), outer[3]});
}

uint64_t Storage::output_nbytes() const {
  if (!cast_to) return nbytes;
  return nbytes / element_size(dtype) * element_size(*cast_to);
}

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t TensorInfo::nbytes() const {
  const uint32_t per = packed_values(dtype);
  return (numel() + per - 1) / per * element_size(dtype);
}

std::optional<StoragePid> parse_storage_pid(const Value& pid) {
  if (pid.kind != ValueKind::kTuple || pid.items.empty()) return std::nullopt;
  const Value* tag = pid.items[0];
  if (!tag->is_str() || tag->text != "storage") return std::nullopt;
  const auto& a = pid.items;
  if (a.size() != 5 && a.size() != 6) {
    throw corrupt("storage persistent id has " + std::to_string(a.size()) + " fields, expected 5 (zip) or 6 (legacy)");
  }
  StoragePid out;
  if (a[1]->kind != ValueKind::kGlobal) throw corrupt("storage persistent id: second field is not a storage class");
  out.class_module = a[1]->text;
  out.class_name = a[1]->name();
  // With OpenOptions::leave_payloads_in_file a str of 1 MiB or more is not
  // read (its text is empty): no torch key or location is that long (a zip
  // record's name is at most 65535 bytes), so it is refused, not aliased.
  if (a[2]->in_file() || a[3]->in_file()) {
    throw corrupt(std::string("storage persistent id: ") + (a[2]->in_file() ? "key" : "location") + " of " +
                  std::to_string((a[2]->in_file() ? a[2] : a[3])->in_file_length()) + " bytes");
  }
  if (a[2]->is_str() || a[2]->kind == ValueKind::kPyStr) {
    out.key = a[2]->text;
  } else if (a[2]->kind == ValueKind::kInt) {
    out.key = std::to_string(a[2]->integer);
  } else {
    throw corrupt("storage persistent id: key is not a string");
  }
  if (!a[3]->is_str() && a[3]->kind != ValueKind::kPyStr) throw corrupt("storage persistent id: location is not a string");
  out.location = a[3]->text;
  int64_t numel;
  if (!as_int(a[4], numel) || numel < 0) throw corrupt("storage persistent id: element count is not a non-negative integer");
  out.numel = static_cast<uint64_t>(numel);
  if (a.size() == 6) out.view_metadata = a[5];
  return out;
}

std::optional<uint32_t> storage_number(std::string_view key, size_t bound) {
  if (key.empty() || key.size() > 9 || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  uint32_t n = 0;
  for (const char c : key) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint32_t>(c - '0');
  }
  if (n >= bound) return std::nullopt;
  return n;
}

void build_storage_table(CheckpointImpl& impl, const std::function<LocatedData(const std::string&)>& locate) {
  // Storages seen, by key: torch's numbered keys in a table (a storage
  // needs a value of the graph, so their numbers stay below its size),
  // any other key in a map. A hash per storage was most of this pass.
  std::vector<int32_t> by_number;
  std::unordered_map<std::string, int32_t> by_key;
  const size_t number_bound = impl.graph.size();
  // The storage class before, which the next one most often shares.
  std::string last_class;
  std::optional<DType> last_dtype;
  impl.graph.for_each([&](Value& v) {
    if (v.kind != ValueKind::kPersistentId || v.pid() == nullptr) return;
    std::optional<StoragePid> pid = parse_storage_pid(*v.pid());
    if (!pid) return;
    if (pid->view_metadata != nullptr && pid->view_metadata->kind != ValueKind::kNone) {
      throw Error(ErrorKind::kUnsupported, "storage '" + pid->key +
                                               "' is a storage view (saved by torch < 0.4), which is not supported; "
                                               "re-save the checkpoint with a newer torch");
    }
    const auto index = static_cast<int32_t>(impl.storages.size());
    int32_t* seen = nullptr;
    if (const std::optional<uint32_t> number = storage_number(pid->key, number_bound)) {
      if (*number >= by_number.size()) {
        by_number.resize(std::min(number_bound, std::max<size_t>(*number + 1, by_number.size() * 2)), -1);
      }
      seen = &by_number[*number];
      if (*seen < 0) {
        *seen = index;
        seen = nullptr;
      }
    } else {
      auto [it, inserted] = by_key.emplace(pid->key, index);
      if (!inserted) seen = &it->second;
    }
    if (seen != nullptr) {
      const Storage& s = impl.storages[static_cast<size_t>(*seen)];
      if (s.numel != pid->numel || s.location != pid->location) {
        throw corrupt("storage '" + pid->key + "' is described twice with different sizes or locations");
      }
      v.storage = *seen;
      return;
    }
    if (impl.storages.size() >= impl.limits.max_storages) {
      throw Error(ErrorKind::kLimit, "the pickle names more than " + std::to_string(impl.limits.max_storages) +
                                         " storages (limit max_storages = " +
                                         std::to_string(impl.limits.max_storages) + ")");
    }
    Storage s;
    s.key = pid->key;
    s.location = pid->location;
    s.numel = pid->numel;
    if (pid->class_name != last_class || !last_dtype) {
      last_dtype = dtype_from_storage_class(pid->class_name);  // UntypedStorage: DType::kUntyped
      last_class = pid->class_name;
    }
    if (last_dtype == DType::kUntyped) {
      s.untyped = true;
      s.dtype = DType::kUntyped;
    } else if (last_dtype) {
      s.dtype = *last_dtype;
    } else {
      throw Error(ErrorKind::kUnsupported, "storage '" + pid->key + "' has unknown storage class '" +
                                               pid->class_module + "." + pid->class_name + "'");
    }
    const auto nbytes = checked_mul(s.numel, element_size(s.dtype));
    if (!nbytes) throw corrupt("storage '" + pid->key + "' element count overflows");
    s.nbytes = *nbytes;
    s.big_endian = impl.big_endian;
    LocatedData data = locate(s.key);
    if (data.available != s.nbytes) {
      throw corrupt("storage '" + s.key + "' needs " + std::to_string(s.nbytes) + " bytes (" + std::to_string(s.numel) +
                    " x " + std::string(dtype_name(s.dtype)) + ") but its data has " + std::to_string(data.available) +
                    " bytes")
          .at(data.source.record);
    }
    s.source = std::move(data.source);
    impl.storages.push_back(std::move(s));
    v.storage = index;
  });
}

uint32_t storage_element_size(const StoragePid& pid) {
  const std::optional<DType> dtype = dtype_from_storage_class(pid.class_name);
  return dtype ? element_size(*dtype) : 1;
}

void make_rebuild_call(ValueGraph& graph, Value& call, const std::vector<Storage>& storages, int32_t storage,
                       int64_t offset, const std::vector<int64_t>& shape, const std::vector<int64_t>& stride,
                       bool requires_grad, Value* ordered_dict) {
  Value* pid = graph.make(ValueKind::kPersistentId);
  pid->storage = storage;
  std::vector<Value*> shape_values, stride_values;
  for (int64_t d : shape) shape_values.push_back(graph.make_int(d));
  for (int64_t d : stride) stride_values.push_back(graph.make_int(d));
  Value* hooks = graph.make(ValueKind::kObject);  // OrderedDict(), as torch writes the backward hooks
  hooks->callable() = ordered_dict != nullptr ? ordered_dict : graph.make_global("collections", "OrderedDict");
  hooks->args() = graph.make_tuple({});
  std::vector<Value*> args = {pid, graph.make_int(offset), graph.make_tuple(std::move(shape_values)),
                              graph.make_tuple(std::move(stride_values)), graph.make_bool(requires_grad), hooks};
  const Storage& s = storages.at(static_cast<size_t>(storage));
  call.reset(ValueKind::kObject);
  if (s.untyped) {
    call.callable() = graph.make_global("torch._utils", "_rebuild_tensor_v3");
    args.push_back(graph.make_global("torch", std::string(dtype_name(s.dtype))));
  } else {
    call.callable() = graph.make_global("torch._utils", "_rebuild_tensor_v2");
  }
  call.args() = graph.make_tuple(std::move(args));
}

void build_tensor_table(CheckpointImpl& impl) {
  // Pass 1: rebuild calls, in pickle order.
  bool parameters = false;  // a global that makes one is in the graph
  impl.graph.for_each([&](Value& v) {
    if (v.kind == ValueKind::kGlobal) {
      parameters |= v.is_global("torch._utils", "_rebuild_parameter") ||
                    v.is_global("torch._utils", "_rebuild_parameter_with_state");
      return;
    }
    if (v.kind != ValueKind::kObject) return;  // the most of a graph, and no tensor
    Tensor t;
    if (!parse_rebuild(impl, v, t)) return;
    if (t.storage >= 0) {
      Storage& s = impl.storages[static_cast<size_t>(t.storage)];
      if (s.untyped && s.dtype == DType::kUntyped) s.dtype = t.dtype;  // v3: the tensor tells the type
    }
    impl.tensor_by_value.emplace(&v, impl.tensors.size());
    impl.tensors.push_back(std::move(t));
  });
  // Pass 2: Parameters wrap a tensor; the Parameter is the tensor's position.
  if (!parameters) return;
  impl.graph.for_each([&](Value& v) {
    if (!v.is_call_to("torch._utils", "_rebuild_parameter") &&
        !v.is_call_to("torch._utils", "_rebuild_parameter_with_state")) {
      return;
    }
    const auto& a = v.args()->items;
    if (a.size() < 3) throw corrupt("malformed _rebuild_parameter call: expected 3 or 4 arguments");
    const size_t* inner = impl.tensor_by_value.find(a[0]);
    if (inner == nullptr) return;  // wraps something we do not model
    Tensor& t = impl.tensors[*inner];
    t.value = &v;
    t.parameter = true;
    // _rebuild_parameter_with_state(data, requires_grad, hooks, state): a Parameter's Python attributes.
    if (v.is_call_to("torch._utils", "_rebuild_parameter_with_state") && a.size() >= 4 &&
        a[3]->kind != ValueKind::kNone && !(a[3]->kind == ValueKind::kDict && a[3]->entries().empty())) {
      t.python_attributes = true;
    }
    if (!as_bool(a[1], t.requires_grad)) throw corrupt("malformed _rebuild_parameter call: requires_grad is not a bool");
    impl.tensor_by_value.emplace(&v, *inner);
  });
}

std::optional<std::string> tensor_view_problem(const Tensor& t, const Storage& s) {
  if (t.shape.size() != t.stride.size()) {
    return "tensor has " + std::to_string(t.shape.size()) + " sizes but " + std::to_string(t.stride.size()) + " strides";
  }
  if (t.storage_offset < 0) return "tensor has a negative storage offset";
  uint64_t last = static_cast<uint64_t>(t.storage_offset);
  bool empty = false;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] < 0) return "tensor has a negative size";
    if (t.stride[i] < 0) return "tensor has a negative stride";
    if (t.shape[i] == 0) empty = true;
  }
  if (empty) return std::nullopt;
  // torch counts elements and bytes in int64 and refuses a shape whose
  // count overflows ("numel: integer multiplication overflow"); a stride
  // of 0 lets such a shape fit any storage, so check the counts themselves.
  std::optional<uint64_t> numel = 1;
  for (int64_t d : t.shape) numel = numel ? checked_mul(*numel, static_cast<uint64_t>(d)) : std::nullopt;
  if (!numel || *numel > static_cast<uint64_t>(INT64_MAX)) {
    return "tensor of shape " + shape_text(t.shape) + " has more elements than fit in 64 bits (torch refuses it)";
  }
  const auto nbytes = checked_mul(*numel, element_size(t.dtype));
  if (!nbytes || *nbytes > static_cast<uint64_t>(INT64_MAX)) {
    return "tensor of shape " + shape_text(t.shape) + " has " + std::to_string(*numel) + " elements of " +
           std::to_string(element_size(t.dtype)) + " bytes, more bytes than fit in 64 bits";
  }
  for (size_t i = 0; i < t.shape.size(); ++i) {
    const auto step = checked_mul(static_cast<uint64_t>(t.shape[i] - 1), static_cast<uint64_t>(t.stride[i]));
    const auto next = step ? checked_add(last, *step) : std::nullopt;
    if (!next) return "tensor view size overflows";
    last = *next;
  }
  const uint32_t elem = element_size(t.dtype);
  // quint4x2 / quint2x4 views count values, several to a storage byte.
  const uint64_t capacity = elem == 0 ? 0 : s.nbytes / elem * packed_values(t.dtype);
  if (last >= capacity) {
    return "tensor view (offset " + std::to_string(t.storage_offset) + ", shape " + std::to_string(t.shape.size()) +
           "-d) needs element " + std::to_string(last) + " but storage '" + s.key + "' has only " +
           std::to_string(capacity) + " elements";
  }
  return std::nullopt;
}

// What torch's empty_strided would refuse of a meta tensor: sizes and
// strides that do not pair up, are negative, or count past 64 bits.
std::optional<std::string> meta_view_problem(const Tensor& t) {
  if (t.shape.size() != t.stride.size()) {
    return "tensor has " + std::to_string(t.shape.size()) + " sizes but " + std::to_string(t.stride.size()) + " strides";
  }
  std::optional<uint64_t> numel = 1;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] < 0 || t.stride[i] < 0) return "tensor has a negative size or stride";
    numel = numel ? checked_mul(*numel, static_cast<uint64_t>(t.shape[i])) : std::nullopt;
  }
  if (!numel || *numel > static_cast<uint64_t>(INT64_MAX)) return "tensor of shape " + shape_text(t.shape) + " has more elements than fit in 64 bits";
  return std::nullopt;
}

void validate_tensor_views(const Checkpoint& checkpoint) {
  const CheckpointImpl& impl = impl_of(checkpoint);
  std::vector<bool> checked(impl.tensors.size(), false);
  // The walk of tensor_positions, without keeping every path: a key is
  // rendered only for the tensor that fails.
  walk_checkpoint(impl, impl.root, [&](Value& v, const Path& path) {
    const size_t* found = impl.tensor_by_value.find(&v);
    if (found == nullptr) return true;
    if (checked[*found]) return false;
    checked[*found] = true;
    const Tensor& t = impl.tensors[*found];
    const std::optional<std::string> problem = t.kind == TensorKind::kMeta
                                                   ? meta_view_problem(t)  // no storage to fit; only the counts torch checks too
                                                   : tensor_view_problem(t, impl.storages[static_cast<size_t>(t.storage)]);
    if (problem) throw Error(ErrorKind::kCorrupt, *problem).at("key '" + path_to_string(path) + "'");
    return false;  // a tensor's arguments are not positions
  });
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> stride(shape.size());
  int64_t step = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    stride[k] = step;
    step *= std::max<int64_t>(shape[k], 1);
  }
  return stride;
}

bool is_contiguous(const TensorInfo& t) {
  int64_t expected = 1;
  for (size_t k = t.shape.size(); k-- > 0;) {
    if (t.shape[k] != 1 && t.stride[k] != expected) return false;
    expected *= t.shape[k];
  }
  return true;
}

Value* begin_built_state_dict(CheckpointImpl& impl) {
  impl.archive_root = "archive";
  impl.style = ArchiveStyle::newest();
  impl.protocol = 2;
  Value* root = impl.graph.make(ValueKind::kObject);
  root->callable() = impl.graph.make_global("collections", "OrderedDict");
  root->args() = impl.graph.make_tuple({});
  return root;
}

void note_state_dict_globals(CheckpointImpl& impl) {
  impl.note_global("collections", "OrderedDict");
  for (const Storage& s : impl.storages) {
    impl.note_global("torch._utils", s.untyped ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
    if (s.untyped) impl.note_global("torch", std::string(dtype_name(s.dtype)));
    else impl.note_global("torch", std::string(*storage_class_name(s.dtype)));
  }
}

}  // namespace ckptfix

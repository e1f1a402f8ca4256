// Rules of the weights-only repair for numpy values, read from how numpy
// pickles them (numpy 1.x and 2.x; the module is numpy.core or numpy._core):
//   dtype:  numpy.dtype('f8', False, True) + BUILD((3, '<', ...))
//   scalar: numpy.core.multiarray.scalar(<dtype>, <bytes>)
//   array:  numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b')
//           + BUILD((1, shape, <dtype>, is_fortran, <bytes>))
// where <bytes> is, at torch's protocol 2, _codecs.encode(<str>, 'latin1').
// An array's bytes still in the input file (OpenOptions::
// leave_payloads_in_file) become a storage read from there when the output
// is written, decoded from latin-1 text on the way: memory stays flat
// however large the array.
#include <cstring>
#include <optional>
#include <unordered_map>
#include <vector>

#include "ckptfix/error.h"
#include "dtype_kernels/convert.h"
#include "io/bytes.h"
#include "model/graph_walk.h"
#include "model/payloads.h"
#include "model/torch_objects.h"
#include "passes/weights_only_rules.h"

namespace ckptfix {
namespace {

bool is_multiarray(const Value& global, std::string_view name) {
  return (global.text == "numpy.core.multiarray" || global.text == "numpy._core.multiarray") && global.name() == name;
}

// The bytes of a numpy value: in memory, or (a large array's, see
// model/payloads.h) still in the input file, as bytes or as latin-1 text.
struct NumpyBytes {
  std::string memory;
  const Value* in_file = nullptr;  // the str or bytes value whose payload is in the file
  bool latin1 = false;             // in_file: UTF-8 text of code points 0..255
};

// The value holding a numpy value's bytes: a BINBYTES, or the str of
// _codecs.encode(str, 'latin1') (as protocol 2 spells bytes).
Value* bytes_holder(Value* v, bool& latin1) {
  latin1 = false;
  if (v->kind == ValueKind::kBytes) return v;
  const Value& call = *v;  // const: reading args makes no parts
  if (!call.is_call_to("_codecs", "encode") || call.args() == nullptr || call.args()->items.size() != 2) return nullptr;
  Value* text = call.args()->items[0];
  const Value* codec = call.args()->items[1];
  if (!text->is_str() || !codec->is_str() || codec->text != "latin1") return nullptr;
  latin1 = true;
  return text;
}

// The bytes `v` stands for. With `may_stay_in_file`, a payload still in the
// input file stays there (become_tensor streams it); otherwise it is read in.
std::optional<NumpyBytes> bytes_of(const RepairContext& ctx, Value* v, bool may_stay_in_file) {
  NumpyBytes out;
  Value* holder = bytes_holder(v, out.latin1);
  if (holder == nullptr) return std::nullopt;
  if (holder->in_file()) {
    if (may_stay_in_file) {
      out.in_file = holder;
      return out;
    }
    read_in_payload(ctx.impl, *holder);
  }
  if (!out.latin1) {
    out.memory = holder->text;
    return out;
  }
  out.memory.reserve(holder->text.size());
  const std::string& s = holder->text;  // UTF-8 of code points 0..255
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.memory += static_cast<char>(c);
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80) {
      out.memory += static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F));
    } else {
      return std::nullopt;  // a code point above 255 or broken UTF-8: not latin-1 bytes
    }
  }
  out.latin1 = false;
  return out;
}

// Where a payload left in the file is, as messages name places in the
// object pickle: "archive/data.pkl+0x1a3".
std::string payload_place(const CheckpointImpl& impl, const Value& payload) {
  const std::string pickle = object_pickle_name(impl);
  const ZipEntry* entry = impl.zip ? impl.zip->find(pickle) : nullptr;
  if (entry == nullptr || payload.in_file_offset() < entry->data_offset) return pickle;
  return pickle + "+" + hex_offset(payload.in_file_offset() - entry->data_offset);
}

struct NumpyType {
  char kind = 0;     // 'b' bool, 'i' int, 'u' unsigned, 'f' float, 'c' complex
  size_t size = 0;   // bytes
  bool big_endian = false;
  std::string name;  // numpy's name: "float16", "int64", "bool"
  DType dtype = DType::kUInt8;
};

// A numpy.dtype value of a numeric or bool type. numpy's dtypes are
// shared (pickled once, then memo references), so one this repair already
// turned into a str is found in ctx.numpy_dtypes.
std::optional<NumpyType> numpy_type(const RepairContext& ctx, const Value* v) {
  std::string code;  // "f8", "i4", "b1", "u1", "c16"
  bool big_endian = false;
  if (auto known = ctx.numpy_dtypes.find(v); known != ctx.numpy_dtypes.end()) {
    big_endian = known->second[0] == '>';
    code = known->second.substr(1);
  } else {
    if (v == nullptr || v->kind != ValueKind::kObject || !v->callable()->is_global("numpy", "dtype")) return std::nullopt;
    if (v->args() == nullptr || v->args()->items.empty() || !v->args()->items[0]->is_str()) return std::nullopt;
    code = v->args()->items[0]->text;
    // BUILD((3, '<' | '>' | '|', ...)): the byte order.
    if (v->states().size() == 1 && v->states()[0]->kind == ValueKind::kTuple && v->states()[0]->items.size() > 1 &&
        v->states()[0]->items[1]->is_str()) {
      big_endian = v->states()[0]->items[1]->text == ">";
    }
  }
  if (code.size() < 2) return std::nullopt;
  NumpyType t;
  t.kind = code[0];
  t.big_endian = big_endian;
  try {
    t.size = std::stoul(code.substr(1));
  } catch (...) {
    return std::nullopt;
  }
  struct Known {
    char kind;
    size_t size;
    const char* name;
    DType dtype;
  };
  static constexpr Known kKnown[] = {
      {'b', 1, "bool", DType::kBool},          {'i', 1, "int8", DType::kInt8},
      {'i', 2, "int16", DType::kInt16},        {'i', 4, "int32", DType::kInt32},
      {'i', 8, "int64", DType::kInt64},        {'u', 1, "uint8", DType::kUInt8},
      {'u', 2, "uint16", DType::kUInt16},      {'u', 4, "uint32", DType::kUInt32},
      {'u', 8, "uint64", DType::kUInt64},      {'f', 2, "float16", DType::kFloat16},
      {'f', 4, "float32", DType::kFloat32},    {'f', 8, "float64", DType::kFloat64},
      {'c', 8, "complex64", DType::kComplex64}, {'c', 16, "complex128", DType::kComplex128},
  };
  for (const Known& k : kKnown) {
    if (k.kind == t.kind && k.size == t.size) {
      t.name = k.name;
      t.dtype = k.dtype;
      return t;
    }
  }
  return std::nullopt;
}

uint64_t load_uint(const char* p, size_t size, bool big_endian) {
  uint64_t out = 0;
  for (size_t i = 0; i < size; ++i) {
    const auto byte = static_cast<unsigned char>(p[big_endian ? i : size - 1 - i]);
    out = (out << 8) | byte;
  }
  return out;
}

double load_float(const char* p, size_t size, bool big_endian) {
  const uint64_t bits = load_uint(p, size, big_endian);
  if (size == 2) return half_bits_to_float(static_cast<uint16_t>(bits));
  if (size == 4) return copy_bits<float>(static_cast<uint32_t>(bits));
  return copy_bits<double>(bits);
}

Value* make_float(ValueGraph& g, double d) {
  Value* v = g.make(ValueKind::kFloat);
  v->float_bits = copy_bits<uint64_t>(d);
  return v;
}

// numpy scalar -> the Python value x.item() gives.
bool become_scalar(RepairContext& ctx, Value& v, const NumpyType& t, const std::string& raw) {
  if (raw.size() != t.size) return false;
  ValueGraph& g = ctx.impl.graph;
  const char* p = raw.data();
  if (t.kind == 'b') {
    v.reset(ValueKind::kBool);
    v.boolean = raw[0] != 0;
  } else if (t.kind == 'i') {
    const uint64_t u = load_uint(p, t.size, t.big_endian);
    const unsigned shift = 64 - 8 * static_cast<unsigned>(t.size);
    v.reset(ValueKind::kInt);
    v.integer = shift == 0 ? static_cast<int64_t>(u) : static_cast<int64_t>(u << shift) >> shift;
  } else if (t.kind == 'u') {
    const uint64_t u = load_uint(p, t.size, t.big_endian);
    if (u <= static_cast<uint64_t>(INT64_MAX)) {
      v.reset(ValueKind::kInt);
      v.integer = static_cast<int64_t>(u);
    } else {  // Python's int: little-endian two's complement, with a 0 sign byte
      v.reset(ValueKind::kBigInt);
      for (int i = 0; i < 8; ++i) v.text += static_cast<char>((u >> (8 * i)) & 0xFF);
      v.text += '\0';
    }
  } else if (t.kind == 'f') {
    v.reset(ValueKind::kFloat);
    v.float_bits = copy_bits<uint64_t>(load_float(p, t.size, t.big_endian));
  } else if (t.kind == 'c') {
    const double re = load_float(p, t.size / 2, t.big_endian), im = load_float(p + t.size / 2, t.size / 2, t.big_endian);
    v.reset(ValueKind::kObject);
    v.callable() = g.make_global("builtins", "complex");
    v.args() = g.make_tuple({make_float(g, re), make_float(g, im)});
  } else {
    return false;
  }
  return true;
}

// numpy array -> a tensor over a new storage holding its bytes.
bool become_tensor(RepairContext& ctx, Value& v, const NumpyType& t, const std::vector<int64_t>& shape, bool fortran,
                   NumpyBytes raw) {
  uint64_t numel = 1;
  uint64_t span = 1;  // the product of the sizes, a 0 counted as 1: the largest stride, which must fit int64
  for (int64_t d : shape) {
    const std::optional<uint64_t> product = d < 0 ? std::nullopt : checked_mul(numel, static_cast<uint64_t>(d));
    const std::optional<uint64_t> extent = d < 0 ? std::nullopt : checked_mul(span, static_cast<uint64_t>(std::max<int64_t>(d, 1)));
    if (!product || !extent || *extent > static_cast<uint64_t>(INT64_MAX)) return false;  // a shape no bytes can fill
    numel = *product;
    span = *extent;
  }
  const std::optional<uint64_t> size = checked_mul(numel, t.size);
  if (!size) return false;
  const uint64_t nbytes = *size;
  if (raw.in_file == nullptr && raw.memory.size() != nbytes) return false;
  // Bytes in the file: a bytes payload is exactly them; latin-1 text has one
  // or two UTF-8 bytes per byte (the exact count is checked as it is decoded).
  const uint64_t text = raw.in_file != nullptr ? raw.in_file->in_file_length() : 0;
  if (raw.in_file != nullptr && (raw.latin1 ? text < nbytes || text / 2 > nbytes : text != nbytes)) return false;
  CheckpointImpl& impl = ctx.impl;
  ValueGraph& g = impl.graph;
  std::vector<int64_t> stride(shape.size());
  int64_t step = 1;
  for (size_t k = 0; k < shape.size(); ++k) {  // C order: last dimension fastest; Fortran: first
    const size_t i = fortran ? k : shape.size() - 1 - k;
    stride[i] = step;
    step *= std::max<int64_t>(shape[i], 1);
  }
  Storage s;
  s.key = "numpy-" + std::to_string(impl.storages.size());
  s.dtype = t.dtype;
  // A release without this unsigned type (torch 1.13 has no uint16 or
  // uint32): the next wider signed type, which holds every value, converted
  // as the bytes are written.
  const DType widened = t.dtype == DType::kUInt16 ? DType::kInt32 : DType::kInt64;
  if (first_torch_loading(t.dtype) > ctx.torch && is_widening(t.dtype, widened)) s.cast_to = widened;
  s.untyped = !storage_class_name(s.output_dtype());
  s.numel = s.untyped ? nbytes : numel;
  s.nbytes = nbytes;
  s.location = "cpu";
  s.big_endian = t.big_endian && t.size > 1;
  if (raw.in_file != nullptr) {  // streamed from the input when written: memory stays flat
    s.source.encoding = raw.latin1 ? StorageSource::Encoding::kLatin1Text : StorageSource::Encoding::kStored;
    s.source.offset = raw.in_file->in_file_offset();
    s.source.length = raw.in_file->in_file_length();
    s.source.record = payload_place(impl, *raw.in_file);
  } else {
    impl.owned_bytes.push_back(std::move(raw.memory));
    s.source.encoding = StorageSource::Encoding::kMemory;
    s.source.memory = reinterpret_cast<const std::byte*>(impl.owned_bytes.back().data());
    s.source.record = "numpy array (memory)";
  }
  const auto storage = static_cast<int32_t>(impl.storages.size());
  impl.storages.push_back(std::move(s));

  make_rebuild_call(g, v, impl.storages, storage, 0, shape, stride, false);

  Tensor tensor;
  tensor.value = &v;
  tensor.rebuild = &v;
  tensor.storage = storage;
  tensor.dtype = impl.storages.back().output_dtype();
  tensor.shape = shape;
  tensor.stride = stride;
  impl.tensor_by_value[&v] = impl.tensors.size();
  impl.tensors.push_back(std::move(tensor));
  return true;
}

std::optional<std::vector<int64_t>> int_tuple(const Value* v) {
  if (v->kind != ValueKind::kTuple) return std::nullopt;
  std::vector<int64_t> out;
  for (const Value* item : v->items) {
    if (item->kind != ValueKind::kInt) return std::nullopt;
    out.push_back(item->integer);
  }
  return out;
}

// The payload of a numpy array: BUILD((version, shape, dtype, is_fortran, rawdata)).
const Value* array_payload(const Value& v) {
  if (v.kind != ValueKind::kObject || v.callable() == nullptr || !is_multiarray(*v.callable(), "_reconstruct")) {
    return nullptr;
  }
  if (v.states().size() != 1 || v.states()[0]->kind != ValueKind::kTuple || v.states()[0]->items.size() != 5) {
    return nullptr;
  }
  bool latin1 = false;
  return bytes_holder(v.states()[0]->items[4], latin1);
}

}  // namespace

std::unordered_set<const Value*> numpy_array_payloads(CheckpointImpl& impl) {
  // How many references each value reachable from the root has. A payload
  // left in the file reads as "" to every rule but the numpy one, so it may
  // stay there only if nothing but its array reaches it: a hostile pickle
  // could also memo-reference it (or the state or _codecs.encode call
  // holding it) from, say, an enum member, whose rule copies its text.
  std::unordered_map<const Value*, uint64_t> parents;
  std::vector<const Value*> stack;
  auto reach = [&](const Value* v) {
    if (v != nullptr && parents[v]++ == 0) stack.push_back(v);
  };
  reach(impl.root);
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    for_each_child(*v, reach);
  }
  auto only_its_array = [&](const Value* v) { return parents.at(v) == 1; };  // all reachable
  std::unordered_set<const Value*> out;
  for (const auto& [v, count] : parents) {
    const Value* payload = array_payload(*v);
    if (payload == nullptr) continue;
    const Value* state = v->states()[0];
    const Value* raw = state->items[4];  // the payload, or _codecs.encode(payload, 'latin1')
    if (!only_its_array(state) || !only_its_array(raw) || !only_its_array(payload)) continue;
    if (raw != payload && !only_its_array(raw->args())) continue;
    out.insert(payload);
  }
  return out;
}

bool repair_numpy_value(RepairContext& ctx, Value& v, const Path& path) {
  if (v.kind != ValueKind::kObject || v.callable() == nullptr) return false;
  const Value& cls = *v.callable();
  if (cls.is_global("numpy", "dtype")) {
    const std::optional<NumpyType> t = numpy_type(ctx, &v);
    if (!t) return false;
    ctx.numpy_dtypes[&v] = (t->big_endian ? ">" : "<") + v.args()->items[0]->text;
    become_str(v, t->name);
    ctx.changes.push_back({path, "numpy.dtype", "str '" + t->name + "'"});
    return true;
  }
  if (is_multiarray(cls, "scalar")) {
    if (v.args() == nullptr || v.args()->items.size() != 2) return false;
    const std::optional<NumpyType> t = numpy_type(ctx, v.args()->items[0]);
    const std::optional<NumpyBytes> raw = bytes_of(ctx, v.args()->items[1], false);
    if (!t || !raw) return false;
    const std::string was = cls.dotted() + " (a numpy." + t->name + " scalar)";
    if (!become_scalar(ctx, v, *t, raw->memory)) return false;
    ctx.changes.push_back({path, was, t->kind == 'b' ? "bool" : t->kind == 'c' ? "complex" : t->kind == 'f' ? "float" : "int"});
    return true;
  }
  if (is_multiarray(cls, "_reconstruct")) {
    // BUILD((version, shape, dtype, is_fortran, rawdata))
    if (v.states().size() != 1 || v.states()[0]->kind != ValueKind::kTuple) return false;
    const auto& s = v.states()[0]->items;
    if (s.size() != 5 || s[3]->kind != ValueKind::kBool) return false;
    const std::optional<std::vector<int64_t>> shape = int_tuple(s[1]);
    const std::optional<NumpyType> t = numpy_type(ctx, s[2]);
    std::optional<NumpyBytes> raw = bytes_of(ctx, s[4], true);
    if (!shape || !t || !raw) return false;
    const bool fortran = s[3]->boolean;
    const std::string was = cls.dotted() + " (a numpy " + t->name + " array)";
    if (!become_tensor(ctx, v, *t, *shape, fortran, std::move(*raw))) return false;
    const DType made = ctx.impl.tensors.back().dtype;
    ctx.changes.push_back({path, was, "tensor " + std::string(dtype_name(made)) + " " + shape_text(*shape) +
                                          (made != t->dtype ? " (widened: torch " + ctx.torch.str() + " has no " +
                                                                  std::string(dtype_name(t->dtype)) + ")"
                                                            : "")});
    return true;
  }
  return false;
}

}  // namespace ckptfix

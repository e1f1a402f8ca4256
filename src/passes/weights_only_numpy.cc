// Rules of the weights-only repair for numpy values, read from how numpy
// pickles them (numpy 1.x and 2.x; the module is numpy.core or numpy._core):
//   dtype:  numpy.dtype('f8', False, True) + BUILD((3, '<', ...))
//   scalar: numpy.core.multiarray.scalar(<dtype>, <bytes>)
//   array:  numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b')
//           + BUILD((1, shape, <dtype>, is_fortran, <bytes>))
// where <bytes> is, at torch's protocol 2, _codecs.encode(<str>, 'latin1').
#include <bit>
#include <cstring>
#include <optional>

#include "ckptfix/error.h"
#include "dtype_kernels/convert.h"
#include "model/torch_objects.h"
#include "passes/weights_only_rules.h"

namespace ckptfix {
namespace {

bool is_multiarray(const Value& global, std::string_view name) {
  return (global.text == "numpy.core.multiarray" || global.text == "numpy._core.multiarray") && global.name() == name;
}

// The bytes a value holds: BINBYTES, or _codecs.encode(str, 'latin1').
std::optional<std::string> bytes_of(const Value* v) {
  if (v->kind == ValueKind::kBytes) return v->text;
  if (!v->is_call_to("_codecs", "encode") || v->args() == nullptr || v->args()->items.size() != 2) return std::nullopt;
  const Value* text = v->args()->items[0];
  const Value* codec = v->args()->items[1];
  if (!text->is_str() || !codec->is_str() || codec->text != "latin1") return std::nullopt;
  std::string out;
  out.reserve(text->text.size());
  const std::string& s = text->text;  // UTF-8 of code points 0..255
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size()) {
      out += static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F));
    } else {
      return std::nullopt;  // a code point above 255: not latin-1 bytes
    }
  }
  return out;
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
  if (size == 4) return std::bit_cast<float>(static_cast<uint32_t>(bits));
  return std::bit_cast<double>(bits);
}

Value* make_float(ValueGraph& g, double d) {
  Value* v = g.make(ValueKind::kFloat);
  v->float_bits = std::bit_cast<uint64_t>(d);
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
    v.float_bits = std::bit_cast<uint64_t>(load_float(p, t.size, t.big_endian));
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
                   std::string raw) {
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    numel *= static_cast<uint64_t>(d);
  }
  if (raw.size() != numel * t.size) return false;
  CheckpointImpl& impl = ctx.impl;
  ValueGraph& g = impl.graph;
  std::vector<int64_t> stride(shape.size());
  int64_t step = 1;
  for (size_t k = 0; k < shape.size(); ++k) {  // C order: last dimension fastest; Fortran: first
    const size_t i = fortran ? k : shape.size() - 1 - k;
    stride[i] = step;
    step *= std::max<int64_t>(shape[i], 1);
  }
  impl.owned_bytes.push_back(std::move(raw));
  const std::string& bytes = impl.owned_bytes.back();
  Storage s;
  s.key = "numpy-" + std::to_string(impl.storages.size());
  s.dtype = t.dtype;
  s.untyped = !storage_class_name(t.dtype);
  s.numel = s.untyped ? bytes.size() : numel;
  s.nbytes = bytes.size();
  s.location = "cpu";
  s.big_endian = t.big_endian && t.size > 1;
  s.source.encoding = StorageSource::Encoding::kMemory;
  s.source.memory = reinterpret_cast<const std::byte*>(bytes.data());
  s.source.record = "numpy array (memory)";
  const auto storage = static_cast<int32_t>(impl.storages.size());
  impl.storages.push_back(std::move(s));

  make_rebuild_call(g, v, impl.storages, storage, 0, shape, stride, false);

  Tensor tensor;
  tensor.value = &v;
  tensor.rebuild = &v;
  tensor.storage = storage;
  tensor.dtype = t.dtype;
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

}  // namespace

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
    const std::optional<std::string> raw = bytes_of(v.args()->items[1]);
    if (!t || !raw) return false;
    const std::string was = cls.dotted() + " (a numpy." + t->name + " scalar)";
    if (!become_scalar(ctx, v, *t, *raw)) return false;
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
    std::optional<std::string> raw = bytes_of(s[4]);
    if (!shape || !t || !raw) return false;
    const bool fortran = s[3]->boolean;
    const std::string was = cls.dotted() + " (a numpy " + t->name + " array)";
    if (!become_tensor(ctx, v, *t, *shape, fortran, std::move(*raw))) return false;
    ctx.changes.push_back({path, was, "tensor " + std::string(dtype_name(t->dtype)) + " " + shape_text(*shape)});
    return true;
  }
  return false;
}

}  // namespace ckptfix

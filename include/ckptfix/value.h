// The value graph: what a pickle describes, without running any of it.
//
// The unpickler turns data.pkl into Values. Plain Python data (None, bool,
// int, float, str, bytes, tuple, list, dict, set) becomes the matching kind.
// Everything a pickle would *call* becomes an Object: the callable (usually
// a Global naming module and attribute), its arguments, and what pickle
// later did to the result (SETITEMS, APPENDS, BUILD). Nothing is imported or
// called; a Global is just two strings.
//
// Values are shared exactly as the pickle's memo shared them, so the graph
// may contain the same Value at several places and even cycles (a list that
// contains itself). All Values live in, and are owned by, one ValueGraph.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckptfix {

enum class ValueKind : uint8_t {
  kNone,
  kBool,
  kInt,        ///< fits int64
  kBigInt,     ///< arbitrary size: `text` holds little-endian two's complement bytes
  kFloat,      ///< `float_bits` holds the exact IEEE-754 binary64 bits
  kStr,        ///< Python str: `text` holds the pickle's UTF-8 bytes as they were
  kPyStr,      ///< Python 2 str (BINSTRING family): `text` holds the raw bytes
  kBytes,      ///< bytes (BINBYTES family, protocol >= 3)
  kByteArray,  ///< bytearray (BYTEARRAY8, protocol 5)
  kTuple,
  kList,
  kDict,
  kSet,
  kFrozenSet,
  kGlobal,        ///< a reference to `text`.`name` (module, qualified name)
  kObject,        ///< the result of calling `callable(*args)` (REDUCE, NEWOBJ, INST, OBJ)
  kPersistentId,  ///< BINPERSID: `pid` is the persistent id; torch uses it for storages
};

/// How an Object was created, so it is written back the same way.
enum class ObjectCreation : uint8_t {
  kReduce,    ///< callable(*args)
  kNewObj,    ///< cls.__new__(cls, *args)
  kNewObjEx,  ///< cls.__new__(cls, *args, **kwargs)
};

/// One mutation pickle applied to an Object after creating it, kept in order.
struct Value;

struct Value {
  ValueKind kind = ValueKind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  uint64_t float_bits = 0;
  std::string text;  ///< str/bytes payload, big int bytes, or a global's module
  std::string name;  ///< a global's attribute name

  /// tuple/list/set elements; for an Object, what APPEND(S) added.
  std::vector<Value*> items;
  /// dict items in order; for an Object, what SETITEM(S) added.
  std::vector<std::pair<Value*, Value*>> entries;

  // kObject
  ObjectCreation creation = ObjectCreation::kReduce;
  Value* callable = nullptr;
  Value* args = nullptr;    ///< a tuple
  Value* kwargs = nullptr;  ///< kNewObjEx only
  std::vector<Value*> states;  ///< BUILD arguments, in order

  // kPersistentId
  Value* pid = nullptr;
  int32_t storage = -1;  ///< index into the checkpoint's storages, when the pid is a torch storage

  bool is(ValueKind k) const { return kind == k; }
  bool is_str() const { return kind == ValueKind::kStr; }
  std::string_view str() const { return text; }
  /// True for a Global naming exactly module.name.
  bool is_global(std::string_view module, std::string_view attr) const {
    return kind == ValueKind::kGlobal && text == module && name == attr;
  }
  /// For an Object: true when its callable is the Global module.name.
  bool is_call_to(std::string_view module, std::string_view attr) const {
    return kind == ValueKind::kObject && callable != nullptr && callable->is_global(module, attr);
  }
  /// "module.name" for a Global.
  std::string dotted() const { return text + "." + name; }
};

/// How a global a pickle names is judged (docs/format.md, "Globals").
enum class GlobalKind : uint8_t {
  kWeightsOnly,  ///< on torch 2.14's default weights_only allowlist
  kData,         ///< known data: builds a value, can neither run code nor touch files
  kUnknown,      ///< anything else that is not a known gadget (a project's own classes)
  kGadget,       ///< a known code, command, import, file or network primitive: refused
};

/// A set of pickle opcodes (one bit per byte value): which opcodes a pickle used.
class OpcodeSet {
 public:
  void insert(uint8_t code) { bits_[code >> 6] |= uint64_t{1} << (code & 63); }
  bool contains(uint8_t code) const { return (bits_[code >> 6] >> (code & 63)) & 1; }
  OpcodeSet& operator|=(const OpcodeSet& other) {
    for (size_t i = 0; i < 4; ++i) bits_[i] |= other.bits_[i];
    return *this;
  }

 private:
  uint64_t bits_[4] = {};
};

/// Owns every Value of one pickle. Addresses stay valid for its lifetime.
class ValueGraph {
 public:
  ValueGraph() = default;
  ValueGraph(const ValueGraph&) = delete;
  ValueGraph& operator=(const ValueGraph&) = delete;
  ValueGraph(ValueGraph&&) = default;
  ValueGraph& operator=(ValueGraph&&) = default;

  Value* make(ValueKind kind) {
    values_.emplace_back();
    values_.back().kind = kind;
    return &values_.back();
  }
  Value* make_none() { return make(ValueKind::kNone); }
  Value* make_bool(bool b) {
    Value* v = make(ValueKind::kBool);
    v->boolean = b;
    return v;
  }
  Value* make_int(int64_t i) {
    Value* v = make(ValueKind::kInt);
    v->integer = i;
    return v;
  }
  Value* make_str(std::string s) {
    Value* v = make(ValueKind::kStr);
    v->text = std::move(s);
    return v;
  }
  Value* make_global(std::string module, std::string attr) {
    Value* v = make(ValueKind::kGlobal);
    v->text = std::move(module);
    v->name = std::move(attr);
    return v;
  }
  Value* make_tuple(std::vector<Value*> items) {
    Value* v = make(ValueKind::kTuple);
    v->items = std::move(items);
    return v;
  }
  size_t size() const { return values_.size(); }

  /// Visits every value in creation order (the order the pickle made them).
  template <typename F>
  void for_each(F&& f) {
    for (Value& v : values_) f(v);
  }

 private:
  std::deque<Value> values_;
};

}  // namespace ckptfix

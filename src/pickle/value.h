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
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckptfix/globals.h"

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

struct Value;
class ValueRoom;

/// An offset in the pickle that nothing has (a value a pass made).
inline constexpr uint64_t kNoOffset = ~uint64_t{0};

/// What only some kinds of value have: dict items, a global's name, an
/// object's call and state, a persistent id. Kept apart from Value so that
/// the common values (numbers, strings, tuples, lists) stay small.
struct ValueParts {
  std::string name;  ///< a global's attribute name
  /// dict items in order; for an Object, what SETITEM(S) added.
  std::vector<std::pair<Value*, Value*>> entries;
  ObjectCreation creation = ObjectCreation::kReduce;
  Value* callable = nullptr;
  Value* args = nullptr;    ///< a tuple
  Value* kwargs = nullptr;  ///< kNewObjEx only
  std::vector<Value*> states;  ///< BUILD arguments, in order
  Value* pid = nullptr;        ///< kPersistentId: the persistent id
  /// kStr/kBytes whose payload the reader left in the input file (see
  /// UnpickleOptions::leave_in_file_from): where it lies there. `text` is
  /// empty until someone reads it in (model/payloads.h).
  uint64_t in_file_offset = 0;
  uint64_t in_file_length = 0;  ///< 0: the payload is in `text`
  /// A Global's or Object's place in the input: the offset of the opcode
  /// that named or made it (GLOBAL, REDUCE, NEWOBJ, ...), the unpickler's
  /// base_offset included; kNoOffset for values the passes made.
  uint64_t op_offset = kNoOffset;
};

/// One value of the graph (88 bytes, its serial number in what would be
/// padding; dicts, globals, objects, persistent ids and payloads left in
/// the input file own a ValueParts besides). The accessors of the parts
/// create them when written to; reading a part a value does not have gives
/// an empty one.
struct Value {
  ValueKind kind = ValueKind::kNone;
  bool boolean = false;
  bool freed = false;    ///< its slot is free for reuse (see ValueGraph::free)
  int32_t storage = -1;  ///< kPersistentId: index into the checkpoint's storages, when it is a torch storage
  uint32_t refs = 0;     ///< references held while the pickle is read (the reader frees a value that loses its last)
  /// Its number in its graph, in the order values were made (a freed
  /// slot's number goes with it to the value made there); kNoSerial for a
  /// value made outside a graph. Tables keyed by values index by it
  /// (pickle/value_map.h).
  uint32_t serial = kNoSerial;
  static constexpr uint32_t kNoSerial = ~uint32_t{0};
  union {
    int64_t integer = 0;  ///< kInt
    uint64_t float_bits;  ///< kFloat
  };
  std::string text;  ///< str/bytes payload, big int bytes, or a global's module
  /// tuple/list/set elements; for an Object, what APPEND(S) added.
  std::vector<Value*> items;

  Value() = default;
  Value(Value&&) noexcept = default;
  Value& operator=(Value&&) noexcept = default;

  const std::string& name() const { return parts().name; }
  std::string& name() { return parts().name; }
  const std::vector<std::pair<Value*, Value*>>& entries() const { return parts().entries; }
  std::vector<std::pair<Value*, Value*>>& entries() { return parts().entries; }
  ObjectCreation creation() const { return parts().creation; }
  ObjectCreation& creation() { return parts().creation; }
  Value* callable() const { return parts().callable; }
  Value*& callable() { return parts().callable; }
  Value* args() const { return parts().args; }
  Value*& args() { return parts().args; }
  Value* kwargs() const { return parts().kwargs; }
  Value*& kwargs() { return parts().kwargs; }
  const std::vector<Value*>& states() const { return parts().states; }
  std::vector<Value*>& states() { return parts().states; }
  Value* pid() const { return parts().pid; }
  Value*& pid() { return parts().pid; }
  bool has_parts() const { return parts_ != nullptr; }
  /// True when no other value is reachable from this one (a number, a
  /// string, an empty tuple): a walk of the graph need not remember it.
  /// Most of a state dict's values are such leaves.
  bool refers_to_nothing() const { return items.empty() && parts_ == nullptr; }
  /// True for a str or bytes whose payload is still in the input file
  /// (its `text` is empty meanwhile).
  bool in_file() const { return parts_ != nullptr && parts_->in_file_length != 0; }
  uint64_t in_file_offset() const { return parts().in_file_offset; }
  uint64_t in_file_length() const { return parts().in_file_length; }
  /// Where the opcode that named or made it is (ValueParts::op_offset).
  uint64_t op_offset() const { return parts().op_offset; }
  void set_op_offset(uint64_t offset) { parts().op_offset = offset; }
  void set_in_file(uint64_t offset, uint64_t length) {
    parts().in_file_offset = offset;
    parts().in_file_length = length;
  }

  bool is(ValueKind k) const { return kind == k; }
  bool is_str() const { return kind == ValueKind::kStr; }
  std::string_view str() const { return text; }
  /// True for a Global naming exactly module.name.
  bool is_global(std::string_view module, std::string_view attr) const {
    return kind == ValueKind::kGlobal && text == module && name() == attr;
  }
  /// For an Object: true when its callable is the Global module.name.
  bool is_call_to(std::string_view module, std::string_view attr) const {
    return kind == ValueKind::kObject && callable() != nullptr && callable()->is_global(module, attr);
  }
  /// "module.name" for a Global.
  std::string dotted() const { return text + "." + name(); }

  /// Back to a fresh value of `k`, dropping everything it held.
  void reset(ValueKind k) {
    kind = k;
    boolean = false;
    freed = false;
    storage = -1;
    refs = 0;
    integer = 0;
    std::string().swap(text);
    std::vector<Value*>().swap(items);
    parts_.reset();
  }

 private:
  static const ValueParts& no_parts() {
    static const ValueParts empty;
    return empty;
  }
  const ValueParts& parts() const { return parts_ ? *parts_ : no_parts(); }
  ValueParts& parts() {
    if (!parts_) parts_ = std::make_unique<ValueParts>();
    return *parts_;
  }
  std::unique_ptr<ValueParts> parts_;
};

static_assert(sizeof(Value) == 88, "a state dict of 100,000 tensors has 1.5 million values: keep them small");

/// Owns every Value of one pickle. Addresses stay valid for its lifetime.
class ValueGraph {
 public:
  ValueGraph() = default;
  /// A graph whose values are numbered from `first_serial` on: one that
  /// holds values made beside another graph's, numbered after them, so
  /// that tables keyed by value index both without collisions.
  explicit ValueGraph(size_t first_serial) : first_serial_(first_serial) {}
  ValueGraph(const ValueGraph&) = delete;
  ValueGraph& operator=(const ValueGraph&) = delete;
  ValueGraph(ValueGraph&&) = default;
  ValueGraph& operator=(ValueGraph&&) = default;

  /// A new value, in the slot of a freed one when there is one.
  Value* make(ValueKind kind) {
    Value* v;
    if (!free_.empty()) {
      v = free_.back();
      free_.pop_back();
      v->reset(kind);
      return v;
    }
    if (chunks_.empty() || used_in_last_ == kChunk) {
      if (!room_.empty()) {
        chunks_.push_back(std::move(room_.back()));
        room_.pop_back();
      } else if (std::unique_ptr<Value[]> made = shared_room_ != nullptr ? take_shared_room() : nullptr) {
        chunks_.push_back(std::move(made));
      } else {
        chunks_.push_back(new_chunk());
      }
      used_in_last_ = 0;
    }
    const size_t serial = first_serial_ + made();
    v = &chunks_.back()[used_in_last_++];  // as Value() made it: nothing to reset
    if (serial < Value::kNoSerial) v->serial = static_cast<uint32_t>(serial);
    v->kind = kind;
    return v;
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
    v->name() = std::move(attr);
    return v;
  }
  Value* make_tuple(std::vector<Value*> items) {
    Value* v = make(ValueKind::kTuple);
    v->items = std::move(items);
    return v;
  }
  /// Releases what `v` holds and makes its slot reusable. Only for values
  /// nothing refers to any more (the reader frees what the pickle discards).
  void free(Value* v) {
    v->reset(ValueKind::kNone);
    v->freed = true;
    free_.push_back(v);
  }
  /// Makes the memory of about a thousand values more now, every page of
  /// it written, so that making them later touches no new page. A page's
  /// first touch was nearly half the time a pickle of 100,000 tensors took
  /// to read; a graph about to be filled on a thread short of time is made
  /// room for on one that is idle (verify/early_reparse.h).
  void add_room() { room_.push_back(new_chunk()); }
  /// Takes the chunks `room` makes on its thread, when it has one ready,
  /// before new memory (pickle/value_room.h); null: no more. Only the
  /// ValueRoom calls this, as it starts and stops.
  void take_room_from(ValueRoom* room) { shared_room_ = room; }
  /// The memory of a chunk of values, every page of it written.
  static std::unique_ptr<Value[]> new_chunk() { return std::make_unique<Value[]>(kChunk); }
  /// Values that can be made without new memory.
  size_t room() const {
    return room_.size() * kChunk + (chunks_.empty() ? 0 : kChunk - used_in_last_);
  }
  /// Frees the room made and not used.
  void release_room() { std::vector<std::unique_ptr<Value[]>>().swap(room_); }

  /// Values made and not freed.
  size_t size() const { return made() - free_.size(); }
  /// One past the serial number of the last value made.
  size_t serial_end() const { return first_serial_ + made(); }

  /// Visits every value not freed, in creation order (the order the pickle
  /// made them, where no slot was reused).
  template <typename F>
  void for_each(F&& f) {
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const size_t used = c + 1 == chunks_.size() ? used_in_last_ : kChunk;
      for (size_t i = 0; i < used; ++i) {
        if (!chunks_[c][i].freed) f(chunks_[c][i]);
      }
    }
  }
  template <typename F>
  void for_each(F&& f) const {
    const_cast<ValueGraph*>(this)->for_each([&](const Value& v) { f(v); });
  }

 private:
  // Values are made in chunks (one allocation for many, addresses stable):
  // a state dict of 100,000 tensors has about 1.5 million of them.
  static constexpr size_t kChunk = 1024;
  size_t made() const { return chunks_.empty() ? 0 : (chunks_.size() - 1) * kChunk + used_in_last_; }

  std::vector<std::unique_ptr<Value[]>> chunks_;
  size_t used_in_last_ = 0;
  std::vector<std::unique_ptr<Value[]>> room_;  // chunks made ahead (add_room), taken before new ones
  ValueRoom* shared_room_ = nullptr;            // chunks made on another thread, taken next
  std::unique_ptr<Value[]> take_shared_room();  // (value_room.cc)
  std::vector<Value*> free_;
  size_t first_serial_ = 0;
};

}  // namespace ckptfix

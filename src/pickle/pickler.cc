#include "pickle/pickler.h"

#include <cstring>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "pickle/global_names.h"
#include "pickle/opcodes.h"
#include "pickle/text_codecs.h"
#include "pickle/value_map.h"

namespace ckptfix {
namespace {

constexpr size_t kBatchSize = 1000;  // CPython's _BATCHSIZE
// A persistent id's own value is written by a nested save_all (through the
// caller's callback): the one recursion of the writer, so its depth is
// bounded. torch's ids are flat tuples; a hostile pickle can nest ids in ids.
constexpr size_t kMaxPersistentIdNesting = 16;

// Protocol 2 readers map Python 2 module names to Python 3 ones
// (fix_imports), so CPython writes the Python 2 names; do the same.
std::string_view python2_module_name(std::string_view module) {
  if (module == "builtins") return "__builtin__";
  if (module == "copyreg") return "copy_reg";
  return module;
}

[[noreturn]] void refuse(const std::string& message) { throw Error(ErrorKind::kUnsupported, message); }

// The writer is iterative: what is left to write is a stack of tasks, so
// the depth of the graph costs heap, never call stack.
class Writer {
 public:
  explicit Writer(const PickleWriterOptions& options) : options_(options) {
    if (options.value_numbers > 0) {
      memo_.reserve(options.value_numbers);
      // Seven bytes a value is what a state dict of tensors takes; the
      // pages of what is reserved and not written are never touched.
      out_.reserve(options.value_numbers * 8);
    }
  }

  std::string finish(Value* root) {
    out_ += static_cast<char>(op::kProto);
    out_ += '\x02';
    save_all(root);
    out_ += static_cast<char>(op::kStop);
    return std::move(out_);
  }

 private:
  struct Task {
    enum class Op : uint8_t {
      kSave,          // write `value`
      kOpcode,        // write `code`
      kMemoize,       // memoize `value` (written just before)
      kFinishTuple,   // close the tuple `value` whose items were written
      kFinishLeafTuple,  // the same for a tuple that cannot reach itself (holds_only_leaves)
      kFinishObject,  // memoize the object `value`, then its APPENDS, SETITEMS and BUILDs
      kAppends,       // `value`'s items from `index` on, in batches
      kSetItems,      // `value`'s entries from `index` on, in batches
      kBuilds,        // `value`'s BUILD states from `index` on
    };
    Op op;
    uint8_t code = 0;
    Value* value = nullptr;
    size_t index = 0;
  };

  void push(Task::Op op, Value* v, size_t index = 0) { tasks_.push_back({op, 0, v, index}); }
  void push_opcode(uint8_t code) { tasks_.push_back({Task::Op::kOpcode, code, nullptr, 0}); }

  // Writes `root` and everything below it; returns when that is done (the
  // persistent id callback runs a nested, shallow save_all of its own).
  void save_all(Value* root) {
    if (nesting_ > kMaxPersistentIdNesting) {
      refuse("persistent ids nested more than " + std::to_string(kMaxPersistentIdNesting) +
             " deep (an id holding an id), which torch never writes");
    }
    ++nesting_;
    const size_t base = tasks_.size();
    push(Task::Op::kSave, root);
    while (tasks_.size() > base) {
      const Task t = tasks_.back();
      tasks_.pop_back();
      switch (t.op) {
        case Task::Op::kSave: save(t.value); break;
        case Task::Op::kOpcode: opcode(t.code); break;
        case Task::Op::kMemoize: memoize(t.value); break;
        case Task::Op::kFinishTuple: finish_tuple(t.value); break;
        case Task::Op::kFinishLeafTuple: finish_leaf_tuple(t.value); break;
        case Task::Op::kFinishObject: finish_object(t.value); break;
        case Task::Op::kAppends: appends(t.value, t.index); break;
        case Task::Op::kSetItems: setitems(t.value, t.index); break;
        case Task::Op::kBuilds:
          if (t.index < t.value->states().size()) {
            push(Task::Op::kBuilds, t.value, t.index + 1);
            push_opcode(op::kBuild);
            push(Task::Op::kSave, t.value->states()[t.index]);
          }
          break;
      }
    }
    --nesting_;
  }

  void opcode(uint8_t code) { out_ += static_cast<char>(code); }

  void memoize(const Value* v) {
    const uint64_t index = memo_.size();
    if (index > UINT32_MAX) refuse("more than 2^32 memoized values, which protocol 2 cannot refer to");
    memo_.emplace(v, static_cast<uint32_t>(index));
    if (index < 256) {
      opcode(op::kBinPut);
      out_ += static_cast<char>(index);
    } else {
      opcode(op::kLongBinPut);
      append_le<uint32_t>(out_, static_cast<uint32_t>(index));
    }
  }

  bool get_if_memoized(const Value* v) {
    const uint32_t* index = memo_.find(v);
    if (index == nullptr) return false;
    if (*index < 256) {
      opcode(op::kBinGet);
      out_ += static_cast<char>(*index);
    } else {
      opcode(op::kLongBinGet);
      append_le<uint32_t>(out_, static_cast<uint32_t>(*index));
    }
    return true;
  }

  void write_int(int64_t i) {
    if (i >= 0 && i <= 0xFF) {
      opcode(op::kBinInt1);
      out_ += static_cast<char>(i);
    } else if (i >= 0 && i <= 0xFFFF) {
      opcode(op::kBinInt2);
      append_le<uint16_t>(out_, static_cast<uint16_t>(i));
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      opcode(op::kBinInt);
      append_le<int32_t>(out_, static_cast<int32_t>(i));
    } else {
      // Minimal little-endian two's complement, as CPython's encode_long.
      std::string bytes(8, '\0');
      std::memcpy(bytes.data(), &i, 8);
      while (!options_.libtorch && bytes.size() > 1) {
        const auto last = static_cast<unsigned char>(bytes.back());
        const auto prev = static_cast<unsigned char>(bytes[bytes.size() - 2]);
        if ((last == 0x00 && !(prev & 0x80)) || (last == 0xFF && (prev & 0x80))) {
          bytes.pop_back();
        } else {
          break;
        }
      }
      write_long_bytes(bytes);
    }
  }

  // Every length field is checked before it is written: protocol 2 has no
  // 8-byte lengths, so what does not fit is refused, never truncated.
  void write_long_bytes(const std::string& bytes) {
    if (bytes.size() < 256) {
      opcode(op::kLong1);
      out_ += static_cast<char>(bytes.size());
    } else {
      opcode(op::kLong4);
      append_le<int32_t>(out_, pickle_length32(bytes.size(), "an integer", INT32_MAX));
    }
    out_ += bytes;
  }

  void write_unicode(std::string_view utf8) {
    opcode(op::kBinUnicode);
    append_le<uint32_t>(out_, pickle_length32(utf8.size(), "a str", UINT32_MAX));
    out_ += utf8;
  }

  // GLOBAL is two lines of text: only dotted identifiers, which can hold no
  // newline, may go there (the reader refuses anything else; this is the
  // second line of defence against a name that carries pickle opcodes).
  void write_global(std::string_view module, std::string_view name) {
    if (!is_dotted_identifier(module) || !is_dotted_identifier(name)) {
      refuse("refusing to write the global '" + std::string(module) + "' '" + std::string(name) +
             "': it is not a dotted Python identifier");
    }
    opcode(op::kGlobal);
    out_ += python2_module_name(module);
    out_ += '\n';
    out_ += name;
    out_ += '\n';
  }

  // Values protocol 2 cannot spell directly are written as the call CPython
  // uses for them: GLOBAL, the arguments (already written by the caller's
  // order of tasks), REDUCE, and `v` (the call's result) memoized unless null.
  void write_bytes(const Value* v, const std::string& payload) {
    if (payload.empty()) {
      write_global("builtins", "bytes");
      opcode(op::kEmptyTuple);
    } else {
      write_global("_codecs", "encode");
      write_unicode(latin1_to_utf8(payload));
      write_unicode("latin1");
      opcode(op::kTuple2);
    }
    opcode(op::kReduce);
    if (v != nullptr) memoize(v);
  }

  // One batch of APPEND(S) for value's items from `from` on, then the rest.
  void appends(Value* v, size_t from) {
    const auto& items = v->items;
    if (from >= items.size()) return;
    const size_t n = std::min(kBatchSize, items.size() - from);
    push(Task::Op::kAppends, v, from + n);
    if (n == 1 && !options_.libtorch) {
      push_opcode(op::kAppend);
      push(Task::Op::kSave, items[from]);
      return;
    }
    opcode(op::kMark);
    push_opcode(op::kAppends);
    for (size_t k = n; k-- > 0;) push(Task::Op::kSave, items[from + k]);
  }

  void setitems(Value* v, size_t from) {
    const auto& entries = v->entries();
    if (from >= entries.size()) return;
    const size_t n = std::min(kBatchSize, entries.size() - from);
    push(Task::Op::kSetItems, v, from + n);
    if (n == 1 && !options_.libtorch) {
      push_opcode(op::kSetItem);
      push(Task::Op::kSave, entries[from].second);
      push(Task::Op::kSave, entries[from].first);
      return;
    }
    opcode(op::kMark);
    push_opcode(op::kSetItems);
    for (size_t k = n; k-- > 0;) {
      push(Task::Op::kSave, entries[from + k].second);
      push(Task::Op::kSave, entries[from + k].first);
    }
  }

  // Kinds the writer never memoizes (as CPython's pickler does not): a
  // value of these is written again wherever it is shared, so the memo
  // need not be asked for it. A state dict's tensors hold five each.
  static bool never_memoized(const Value& v) {
    switch (v.kind) {
      case ValueKind::kNone: case ValueKind::kBool: case ValueKind::kInt: case ValueKind::kBigInt:
      case ValueKind::kFloat:
        return true;
      default:
        return false;
    }
  }

  // A tuple of such values and strings, globals and other things that
  // refer to nothing (shapes, strides, torch's persistent ids) cannot reach
  // itself: it needs no cycle bookkeeping.
  static bool holds_only_leaves(const Value& tuple) {
    for (const Value* item : tuple.items) {
      if (!item->refers_to_nothing() && item->kind != ValueKind::kGlobal) return false;
    }
    return true;
  }

  void save(Value* v) {
    if (!never_memoized(*v) && get_if_memoized(v)) return;
    switch (v->kind) {
      case ValueKind::kNone: opcode(op::kNone); return;
      case ValueKind::kBool: opcode(v->boolean ? op::kNewTrue : op::kNewFalse); return;
      case ValueKind::kInt: write_int(v->integer); return;
      case ValueKind::kBigInt:
        if (options_.libtorch) refuse("LibTorch cannot read integers beyond 64 bits");
        write_long_bytes(v->text);
        return;
      case ValueKind::kFloat: {
        opcode(op::kBinFloat);
        for (int shift = 56; shift >= 0; shift -= 8) out_ += static_cast<char>((v->float_bits >> shift) & 0xFF);
        return;
      }
      case ValueKind::kStr:
        write_unicode(v->text);
        memoize(v);
        return;
      case ValueKind::kPyStr:
        if (v->text.size() < 256) {
          opcode(op::kShortBinString);
          out_ += static_cast<char>(v->text.size());
        } else {
          opcode(op::kBinString);
          append_le<int32_t>(out_, pickle_length32(v->text.size(), "a Python 2 str", INT32_MAX));
        }
        out_ += v->text;
        memoize(v);
        return;
      case ValueKind::kBytes: write_bytes(v, v->text); return;
      case ValueKind::kByteArray:
        write_global("builtins", "bytearray");
        write_bytes(nullptr, v->text);
        opcode(op::kTuple1);
        opcode(op::kReduce);
        memoize(v);
        return;
      case ValueKind::kTuple: save_tuple(v); return;
      case ValueKind::kList:
        opcode(op::kEmptyList);
        memoize(v);
        push(Task::Op::kAppends, v);
        return;
      case ValueKind::kDict:
        opcode(op::kEmptyDict);
        memoize(v);
        push(Task::Op::kSetItems, v);
        return;
      case ValueKind::kSet:
      case ValueKind::kFrozenSet:
        // builtins.set([...]), as CPython writes a set at protocol 2.
        write_global("builtins", v->kind == ValueKind::kSet ? "set" : "frozenset");
        opcode(op::kEmptyList);
        push(Task::Op::kMemoize, v);
        push_opcode(op::kReduce);
        push_opcode(op::kTuple1);
        push(Task::Op::kAppends, v);
        return;
      case ValueKind::kGlobal:
        write_global(v->text, v->name());
        memoize(v);
        return;
      case ValueKind::kObject: save_object(v); return;
      case ValueKind::kPersistentId:
        if (!options_.persistent_id) refuse("persistent id without a writer for it");
        options_.persistent_id(*v, [&](Value* pid) { save_all(pid); });
        opcode(op::kBinPersId);
        return;
    }
  }

  void save_tuple(Value* v) {
    const auto& items = v->items;
    if (items.empty()) {
      opcode(op::kEmptyTuple);  // CPython never memoizes the empty tuple
      return;
    }
    if (holds_only_leaves(*v)) {
      if (items.size() > 3) opcode(op::kMark);
      push(Task::Op::kFinishLeafTuple, v);
      for (size_t k = items.size(); k-- > 0;) push(Task::Op::kSave, items[k]);
      return;
    }
    if (!in_progress_.insert(v)) refuse("a tuple contains itself, which protocol 2 cannot express");
    if (items.size() > 3) opcode(op::kMark);
    push(Task::Op::kFinishTuple, v);
    for (size_t k = items.size(); k-- > 0;) push(Task::Op::kSave, items[k]);
  }

  void finish_tuple(Value* v) {
    in_progress_.erase(v);
    if (memo_.count(v)) {
      // A cycle through a list or dict reached this tuple while its items
      // were being written; CPython then discards the copy. Reject instead.
      refuse("a tuple is reachable from its own items, which is not supported");
    }
    finish_leaf_tuple(v);
  }

  void finish_leaf_tuple(Value* v) {
    static constexpr uint8_t kSmall[] = {0, op::kTuple1, op::kTuple2, op::kTuple3};
    const size_t n = v->items.size();
    opcode(n <= 3 ? kSmall[n] : op::kTuple);
    memoize(v);
  }

  void save_object(Value* v) {
    if (!in_progress_.insert(v)) refuse("an object is an argument of its own constructor");
    push(Task::Op::kFinishObject, v);
    switch (v->creation()) {
      case ObjectCreation::kReduce:
      case ObjectCreation::kNewObj:
        push_opcode(v->creation() == ObjectCreation::kReduce ? op::kReduce : op::kNewObj);
        push(Task::Op::kSave, v->args());
        push(Task::Op::kSave, v->callable());
        break;
      case ObjectCreation::kNewObjEx:
        // Protocol 2 has no NEWOBJ_EX: copyreg.__newobj_ex__(cls, args, kwargs).
        write_global("copyreg", "__newobj_ex__");
        push_opcode(op::kReduce);
        push_opcode(op::kTuple3);
        push(Task::Op::kSave, v->kwargs());
        push(Task::Op::kSave, v->args());
        push(Task::Op::kSave, v->callable());
        break;
    }
  }

  void finish_object(Value* v) {
    in_progress_.erase(v);
    memoize(v);
    push(Task::Op::kBuilds, v);
    push(Task::Op::kSetItems, v);
    push(Task::Op::kAppends, v);
  }

  const PickleWriterOptions& options_;
  std::string out_;
  std::vector<Task> tasks_;
  size_t nesting_ = 0;  // save_all calls under way: the root, and persistent ids' values within it
  ValueMap<uint32_t> memo_;  // protocol 2 refers to at most 2^32 memoized values
  PointerSet<Value> in_progress_;
};

}  // namespace

int32_t pickle_length32(uint64_t length, const char* what, uint64_t max) {
  if (length > max) {
    throw Error(ErrorKind::kUnsupported, what + std::string(" of ") + std::to_string(length) +
                                             " bytes is longer than pickle protocol 2 can write (" +
                                             std::to_string(max) + " bytes)");
  }
  return static_cast<int32_t>(static_cast<uint32_t>(length));
}

std::string pickle_protocol2(Value* root, const PickleWriterOptions& options) {
  Writer writer(options);
  return writer.finish(root);
}

}  // namespace ckptfix

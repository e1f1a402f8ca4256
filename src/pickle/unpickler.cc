#include "pickle/unpickler.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "pickle/global_policy.h"
#include "pickle/opcodes.h"
#include "pickle/text_codecs.h"

namespace ckptfix {

void refuse_dangerous_global(const std::string& module, const std::string& name) {
  const GlobalClass c = classify_global(module, name);
  if (c.kind == GlobalKind::kGadget) throw dangerous_global_error(module, name, c.matched);
}

Error dangerous_global_error(const std::string& module, const std::string& name, const std::string& matched) {
  const std::string dotted = module + "." + name;
  const std::string why = matched.empty() || matched == dotted ? "" : " (" + matched + ")";
  return Error(ErrorKind::kUnsafe, "refusing to load: the pickle references the dangerous global '" + dotted + "'" +
                                       why + ", which would run code or touch files when loaded");
}

namespace {

class Machine {
 public:
  Machine(std::span<const std::byte> bytes, ValueGraph& graph, const UnpickleOptions& options)
      : in_(bytes), graph_(graph), options_(options) {}

  UnpickleResult run();

 private:
  [[noreturn]] void fail(const std::string& message, ErrorKind kind = ErrorKind::kCorrupt) const {
    throw Error(kind, message).at("+" + hex_offset(options_.base_offset + op_pos_));
  }

  // Input
  std::span<const std::byte> take(uint64_t n) {
    if (n > in_.size() - pos_) fail("pickle data ends in the middle of an opcode (truncated)");
    auto out = in_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  uint8_t u8() { return std::to_integer<uint8_t>(take(1)[0]); }
  template <typename T>
  T le() { return load_le<T>(take(sizeof(T)).data()); }
  std::string_view line() {
    const uint64_t start = pos_;
    while (pos_ < in_.size() && in_[pos_] != std::byte{'\n'}) ++pos_;
    if (pos_ >= in_.size()) fail("pickle data ends inside a text argument (truncated)");
    std::string_view s = as_chars(in_.subspan(start, pos_ - start));
    ++pos_;
    return s;
  }
  uint64_t length_arg(uint64_t n) {
    if (n > in_.size() - pos_) fail("length " + std::to_string(n) + " runs past the end of the pickle (truncated)");
    return n;
  }

  // Stack
  void push(Value* v) { stack_.push_back(v); }
  Value* pop() {
    if (stack_.empty()) fail("pickle stack underflow (damaged pickle)");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.empty()) fail("pickle stack underflow (damaged pickle)");
    return stack_.back();
  }
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("pickle opcode needs a MARK but none is set (damaged pickle)");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  // Memo
  void memo_put(uint64_t index) { memo_[index] = top(); }
  Value* memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("pickle refers to memo entry " + std::to_string(index) + ", which was never stored");
    return it->second;
  }

  Value* global(std::string module, std::string name) {
    if (options_.on_global) {
      try {
        options_.on_global(module, name);
      } catch (Error& e) {
        e.at("+" + hex_offset(options_.base_offset + op_pos_));
        throw;
      }
    }
    return graph_.make_global(std::move(module), std::move(name));
  }

  Value* object(ObjectCreation how, Value* callable, Value* args, Value* kwargs = nullptr) {
    Value* v = graph_.make(ValueKind::kObject);
    v->creation = how;
    v->callable = callable;
    v->args = args;
    v->kwargs = kwargs;
    return v;
  }

  Value* tuple(std::vector<Value*> items) { return graph_.make_tuple(std::move(items)); }

  Value* int_from_le_bytes(std::span<const std::byte> bytes) {
    if (bytes.size() <= 8) {
      uint64_t u = 0;
      for (size_t i = 0; i < bytes.size(); ++i) u |= static_cast<uint64_t>(std::to_integer<uint8_t>(bytes[i])) << (8 * i);
      if (!bytes.empty() && bytes.size() < 8 && (std::to_integer<uint8_t>(bytes.back()) & 0x80)) {
        u |= ~uint64_t{0} << (8 * bytes.size());  // sign-extend
      }
      return graph_.make_int(static_cast<int64_t>(u));
    }
    Value* v = graph_.make(ValueKind::kBigInt);
    v->text.assign(as_chars(bytes));
    return v;
  }

  Value* int_from_text(std::string_view text) {
    std::string s(text);
    if (!s.empty() && s.back() == 'L') s.pop_back();  // LONG's Python 2 suffix
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return graph_.make_int(v);
    std::string bytes;
    if (!decimal_to_le_twos_complement(s, bytes)) fail("bad integer literal '" + std::string(text) + "' in pickle");
    return int_from_le_bytes(as_bytes(bytes));
  }

  void append_to(Value* target, std::vector<Value*> items) {
    if (target->kind == ValueKind::kList || target->kind == ValueKind::kObject) {
      target->items.insert(target->items.end(), items.begin(), items.end());
    } else {
      fail("APPEND on a value that is not a list");
    }
  }
  void set_items(Value* target, const std::vector<Value*>& kv) {
    if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of stack items");
    if (target->kind != ValueKind::kDict && target->kind != ValueKind::kObject) fail("SETITEM on a value that is not a dict");
    for (size_t i = 0; i < kv.size(); i += 2) target->entries.emplace_back(kv[i], kv[i + 1]);
  }

  std::span<const std::byte> in_;
  ValueGraph& graph_;
  const UnpickleOptions& options_;
  uint64_t pos_ = 0;
  uint64_t op_pos_ = 0;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Value*> memo_;
  int protocol_ = 0;
  OpcodeSet opcodes_;
};

UnpickleResult Machine::run() {
  while (true) {
    if (pos_ >= in_.size()) {
      op_pos_ = pos_;
      fail("pickle data ends before its STOP opcode (truncated)");
    }
    op_pos_ = pos_;
    const uint8_t code = u8();
    opcodes_.insert(code);
    switch (code) {
      case op::kProto: {
        protocol_ = u8();
        if (protocol_ > 5) fail("unsupported pickle protocol " + std::to_string(protocol_), ErrorKind::kUnsupported);
        break;
      }
      case op::kFrame: {
        // A framing hint only: the frame's bytes are ordinary opcodes.
        const uint64_t n = le<uint64_t>();
        if (n > in_.size() - pos_) fail("pickle frame of " + std::to_string(n) + " bytes runs past the end (truncated)");
        break;
      }
      case op::kStop: {
        Value* root = pop();
        return {root, pos_, protocol_, opcodes_};
      }

      // Stack and memo manipulation
      case op::kMark: marks_.push_back(stack_.size()); break;
      case op::kPop:
        if (!stack_.empty()) {
          stack_.pop_back();
        } else {
          pop_mark();  // CPython: POP with an empty stack discards the mark
        }
        break;
      case op::kPopMark: pop_mark(); break;
      case op::kDup: push(top()); break;
      case op::kPut: {
        std::string_view s = line();
        char* end = nullptr;
        std::string t(s);
        const unsigned long long i = std::strtoull(t.c_str(), &end, 10);
        if (t.empty() || end != t.c_str() + t.size()) fail("bad PUT index");
        memo_put(i);
        break;
      }
      case op::kBinPut: memo_put(u8()); break;
      case op::kLongBinPut: memo_put(le<uint32_t>()); break;
      case op::kMemoize: memo_put(memo_.size()); break;
      case op::kGet: {
        std::string t(line());
        char* end = nullptr;
        const unsigned long long i = std::strtoull(t.c_str(), &end, 10);
        if (t.empty() || end != t.c_str() + t.size()) fail("bad GET index");
        push(memo_get(i));
        break;
      }
      case op::kBinGet: push(memo_get(u8())); break;
      case op::kLongBinGet: push(memo_get(le<uint32_t>())); break;

      // Atoms
      case op::kNone: push(graph_.make_none()); break;
      case op::kNewTrue: push(graph_.make_bool(true)); break;
      case op::kNewFalse: push(graph_.make_bool(false)); break;
      case op::kInt: {
        std::string_view s = line();
        if (s == "01") {
          push(graph_.make_bool(true));
        } else if (s == "00") {
          push(graph_.make_bool(false));
        } else {
          push(int_from_text(s));
        }
        break;
      }
      case op::kLong: push(int_from_text(line())); break;
      case op::kBinInt: push(graph_.make_int(le<int32_t>())); break;
      case op::kBinInt1: push(graph_.make_int(u8())); break;
      case op::kBinInt2: push(graph_.make_int(le<uint16_t>())); break;
      case op::kLong1: push(int_from_le_bytes(take(u8()))); break;
      case op::kLong4: {
        const int32_t n = le<int32_t>();
        if (n < 0) fail("LONG4 with a negative length");
        push(int_from_le_bytes(take(length_arg(static_cast<uint64_t>(n)))));
        break;
      }
      case op::kFloat: {
        std::string t(line());
        char* end = nullptr;
        const double d = std::strtod(t.c_str(), &end);
        if (t.empty() || end != t.c_str() + t.size()) fail("bad FLOAT literal '" + t + "'");
        Value* v = graph_.make(ValueKind::kFloat);
        std::memcpy(&v->float_bits, &d, 8);
        push(v);
        break;
      }
      case op::kBinFloat: {
        Value* v = graph_.make(ValueKind::kFloat);
        v->float_bits = load_be<uint64_t>(take(8).data());  // BINFLOAT is big-endian
        push(v);
        break;
      }

      // Strings and bytes
      case op::kString: {
        std::string decoded;
        if (!decode_python_string_literal(line(), decoded)) fail("bad STRING literal");
        Value* v = graph_.make(ValueKind::kPyStr);
        v->text = std::move(decoded);
        push(v);
        break;
      }
      case op::kBinString: {
        const int32_t n = le<int32_t>();
        if (n < 0) fail("BINSTRING with a negative length");
        Value* v = graph_.make(ValueKind::kPyStr);
        v->text.assign(as_chars(take(length_arg(static_cast<uint64_t>(n)))));
        push(v);
        break;
      }
      case op::kShortBinString: {
        Value* v = graph_.make(ValueKind::kPyStr);
        v->text.assign(as_chars(take(u8())));
        push(v);
        break;
      }
      case op::kUnicode: {
        std::string utf8;
        if (!decode_raw_unicode_escape(line(), utf8)) fail("bad UNICODE literal");
        push(graph_.make_str(std::move(utf8)));
        break;
      }
      case op::kBinUnicode: push(graph_.make_str(std::string(as_chars(take(length_arg(le<uint32_t>())))))); break;
      case op::kShortBinUnicode: push(graph_.make_str(std::string(as_chars(take(u8()))))); break;
      case op::kBinUnicode8: push(graph_.make_str(std::string(as_chars(take(length_arg(le<uint64_t>())))))); break;
      case op::kBinBytes:
      case op::kShortBinBytes:
      case op::kBinBytes8:
      case op::kByteArray8: {
        uint64_t n = code == op::kShortBinBytes ? u8() : code == op::kBinBytes ? le<uint32_t>() : le<uint64_t>();
        Value* v = graph_.make(code == op::kByteArray8 ? ValueKind::kByteArray : ValueKind::kBytes);
        v->text.assign(as_chars(take(length_arg(n))));
        push(v);
        break;
      }

      // Containers
      case op::kEmptyTuple: push(tuple({})); break;
      case op::kTuple: push(tuple(pop_mark())); break;
      case op::kTuple1: {
        Value* a = pop();
        push(tuple({a}));
        break;
      }
      case op::kTuple2: {
        Value* b = pop();
        Value* a = pop();
        push(tuple({a, b}));
        break;
      }
      case op::kTuple3: {
        Value* c = pop();
        Value* b = pop();
        Value* a = pop();
        push(tuple({a, b, c}));
        break;
      }
      case op::kEmptyList: push(graph_.make(ValueKind::kList)); break;
      case op::kList: {
        Value* v = graph_.make(ValueKind::kList);
        v->items = pop_mark();
        push(v);
        break;
      }
      case op::kAppend: {
        Value* item = pop();
        append_to(top(), {item});
        break;
      }
      case op::kAppends: {
        std::vector<Value*> items = pop_mark();
        append_to(top(), std::move(items));
        break;
      }
      case op::kEmptyDict: push(graph_.make(ValueKind::kDict)); break;
      case op::kDict: {
        Value* v = graph_.make(ValueKind::kDict);
        set_items(v, pop_mark());
        push(v);
        break;
      }
      case op::kSetItem: {
        Value* value = pop();
        Value* key = pop();
        set_items(top(), {key, value});
        break;
      }
      case op::kSetItems: {
        std::vector<Value*> kv = pop_mark();
        set_items(top(), kv);
        break;
      }
      case op::kEmptySet: push(graph_.make(ValueKind::kSet)); break;
      case op::kAddItems: {
        std::vector<Value*> items = pop_mark();
        Value* target = top();
        if (target->kind != ValueKind::kSet) fail("ADDITEMS on a value that is not a set");
        target->items.insert(target->items.end(), items.begin(), items.end());
        break;
      }
      case op::kFrozenSet: {
        Value* v = graph_.make(ValueKind::kFrozenSet);
        v->items = pop_mark();
        push(v);
        break;
      }

      // Globals and calls
      case op::kGlobal: {
        std::string module(line());
        std::string name(line());
        push(global(std::move(module), std::move(name)));
        break;
      }
      case op::kStackGlobal: {
        Value* name = pop();
        Value* module = pop();
        if (!module->is_str() || !name->is_str()) fail("STACK_GLOBAL needs two str operands");
        push(global(module->text, name->text));
        break;
      }
      case op::kInst: {
        std::string module(line());
        std::string name(line());
        Value* cls = global(std::move(module), std::move(name));
        push(object(ObjectCreation::kReduce, cls, tuple(pop_mark())));
        break;
      }
      case op::kObj: {
        std::vector<Value*> items = pop_mark();
        if (items.empty()) fail("OBJ without a class");
        Value* cls = items.front();
        items.erase(items.begin());
        push(object(ObjectCreation::kReduce, cls, tuple(std::move(items))));
        break;
      }
      case op::kReduce: {
        Value* args = pop();
        Value* callable = pop();
        if (args->kind != ValueKind::kTuple) fail("REDUCE arguments are not a tuple");
        push(object(ObjectCreation::kReduce, callable, args));
        break;
      }
      case op::kNewObj: {
        Value* args = pop();
        Value* cls = pop();
        if (args->kind != ValueKind::kTuple) fail("NEWOBJ arguments are not a tuple");
        push(object(ObjectCreation::kNewObj, cls, args));
        break;
      }
      case op::kNewObjEx: {
        Value* kwargs = pop();
        Value* args = pop();
        Value* cls = pop();
        if (args->kind != ValueKind::kTuple || kwargs->kind != ValueKind::kDict) fail("NEWOBJ_EX needs a tuple and a dict");
        push(object(ObjectCreation::kNewObjEx, cls, args, kwargs));
        break;
      }
      case op::kBuild: {
        Value* state = pop();
        Value* target = top();
        if (target->kind != ValueKind::kObject) fail("BUILD on a value that is not an object");
        target->states.push_back(state);
        break;
      }
      case op::kPersId: {
        Value* v = graph_.make(ValueKind::kPersistentId);
        v->pid = graph_.make_str(std::string(line()));
        push(v);
        break;
      }
      case op::kBinPersId: {
        Value* v = graph_.make(ValueKind::kPersistentId);
        v->pid = pop();
        push(v);
        break;
      }

      case op::kExt1:
      case op::kExt2:
      case op::kExt4:
        fail("pickle uses the copyreg extension registry (EXT opcodes), which torch.save never writes",
             ErrorKind::kUnsupported);
      case op::kNextBuffer:
      case op::kReadOnlyBuffer:
        fail("pickle uses out-of-band buffers (protocol 5), which torch.save never writes", ErrorKind::kUnsupported);
      default: {
        char buf[8];
        std::snprintf(buf, sizeof buf, "0x%02x", code);
        fail(std::string("unknown pickle opcode ") + buf);
      }
    }
  }
}

}  // namespace

UnpickleResult unpickle(std::span<const std::byte> bytes, ValueGraph& graph, const UnpickleOptions& options) {
  UnpickleOptions effective = options;
  if (!effective.on_global) effective.on_global = refuse_dangerous_global;
  Machine machine(bytes, graph, effective);
  return machine.run();
}

}  // namespace ckptfix

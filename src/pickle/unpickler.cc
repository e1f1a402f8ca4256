#include "pickle/unpickler.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "pickle/call_analysis.h"
#include "pickle/global_names.h"
#include "pickle/global_policy.h"
#include "pickle/opcodes.h"
#include "pickle/text_codecs.h"

namespace ckptfix {

void refuse_dangerous_global(const std::string& module, const std::string& name, uint64_t /*offset*/) {
  const GlobalClass c = classify_global(module, name);
  if (c.kind == GlobalKind::kGadget) throw dangerous_global_error(module, name, c.matched);
}

Error dangerous_global_error(const std::string& module, const std::string& name, const std::string& matched) {
  const std::string dotted = module + "." + name;
  const std::string why = matched.empty() || matched == dotted ? "" : " (" + matched + ")";
  return Error(ErrorKind::kUnsafe, "refusing to load: the pickle references the dangerous global '" + dotted + "'" +
                                       why + ", which would run code or touch files when loaded");
}

Error called_function_error(const std::string& module, const std::string& name) {
  return Error(ErrorKind::kUnsafe, "refusing to load: the pickle calls '" + module + "." + name +
                                       "' while it is loaded; a checkpoint may hold such a function as a value "
                                       "(an activation kept by a module), never call it");
}

namespace {

// CPython's int() refuses longer decimal literals by default (Python >= 3.11,
// sys.int_info.default_max_str_digits), and converting them is quadratic.
constexpr size_t kMaxDecimalDigits = 4300;

class Machine {
 public:
  Machine(std::span<const std::byte> bytes, ValueGraph& graph, const UnpickleOptions& options)
      : in_(bytes), graph_(graph), options_(options) {}

  UnpickleResult run();

 private:
  UnpickleResult loop();
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
  /// A str or bytes value of the next n bytes: copied, or when large enough
  /// (options_.leave_in_file_from) only located, so that a numpy array's
  /// gigabyte of text is neither copied nor paged in.
  Value* payload(ValueKind kind, uint64_t n) {
    length_arg(n);
    Value* v = graph_.make(kind);
    if (options_.leave_in_file_from != 0 && n >= options_.leave_in_file_from) {
      v->set_in_file(options_.file_offset + pos_, n);
      pos_ += n;
      left_in_file_ += n;
    } else {
      v->text.assign(as_chars(take(n)));
      if (kind == ValueKind::kStr) refuse_bad_utf8(v->text);
    }
    return v;
  }

  /// CPython decodes a str's bytes as UTF-8, surrogates passed: a str that
  /// is not would not load, and read as bytes here it would be written back
  /// as text that means other characters (or none).
  void refuse_bad_utf8(std::string_view text) {
    if (!is_utf8_surrogatepass(text)) fail("a str that is not UTF-8 (CPython refuses to load it)");
  }

  /// A PUT or GET index: decimal digits CPython reads as the same number.
  uint64_t memo_index(std::string_view text, const char* opcode) {
    if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string_view::npos) {
      fail(std::string(opcode) + " index '" + std::string(text) + "' is not a plain decimal index");
    }
    return std::stoull(std::string(text));
  }


  // References. Every place that holds a value (the stack, the memo,
  // another value) counts as one; a value the pickle discards is freed when
  // its count drops to zero, and so are the values only it held.
  static void hold(Value* v) { ++v->refs; }
  void release(Value* v) {
    if (--v->refs > 0 || v->kind == ValueKind::kPersistentId) return;
    std::vector<Value*>& pending = release_pending_;
    pending.push_back(v);
    while (!pending.empty()) {
      Value* dead = pending.back();
      pending.pop_back();
      auto drop = [&](Value* child) {
        if (child != nullptr && --child->refs == 0 && child->kind != ValueKind::kPersistentId) pending.push_back(child);
      };
      for (Value* item : dead->items) drop(item);
      if (dead->has_parts()) {
        const Value& parts = *dead;
        for (const auto& [k, val] : parts.entries()) {
          drop(k);
          drop(val);
        }
        for (Value* state : parts.states()) drop(state);
        drop(parts.callable());
        drop(parts.args());
        drop(parts.kwargs());
      }
      calls_.forget(dead);
      graph_.free(dead);
    }
  }
  // Stack. Values below the innermost MARK are fenced off, as in CPython:
  // only MARK-consuming opcodes reach past them, and only to the mark.
  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(Value* v) {
    hold(v);
    stack_.push_back(v);
  }
  /// Pops the top; the caller owns the stack's reference (stores it, or releases it).
  Value* pop() {
    if (stack_.size() <= fence()) fail("pickle stack underflow (damaged pickle)");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.size() <= fence()) fail("pickle stack underflow (damaged pickle)");
    return stack_.back();
  }
  /// The values above the innermost MARK; the caller owns their references.
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("pickle opcode needs a MARK but none is set (damaged pickle)");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  // Memo
  // Picklers number memo entries 0, 1, 2, ...: those live in a vector. An
  // index out of that sequence (a hostile LONG_BINPUT 4000000000) goes to a
  // map, so memory follows the entries, not the indices.
  void memo_put(uint64_t index) {
    Value* v = top();
    hold(v);
    Value** slot = nullptr;
    if (index < memo_dense_.size()) {
      slot = &memo_dense_[index];
    } else if (index == memo_dense_.size() && !memo_sparse_.count(index)) {
      memo_dense_.push_back(nullptr);
      slot = &memo_dense_.back();
    } else {
      slot = &memo_sparse_[index];
    }
    if (*slot == nullptr) ++memo_entries_;
    Value* old = *slot;
    *slot = v;
    if (old != nullptr) release(old);
  }
  Value* memo_get(uint64_t index) {
    Value* v = nullptr;
    if (index < memo_dense_.size()) {
      v = memo_dense_[index];
    } else if (auto it = memo_sparse_.find(index); it != memo_sparse_.end()) {
      v = it->second;
    }
    if (v == nullptr) fail("pickle refers to memo entry " + std::to_string(index) + ", which was never stored");
    return v;
  }
  void memo_clear() {
    for (Value* v : memo_dense_) {
      if (v != nullptr) release(v);
    }
    for (auto& [index, v] : memo_sparse_) release(v);
    memo_dense_.clear();
    memo_sparse_.clear();
    memo_entries_ = 0;
  }

  // What the pickle holds at once, against options_.max_values.
  void check_size() const {
    const uint64_t held = graph_.size() + stack_.size() + marks_.size() + memo_entries_;
    if (options_.max_values != 0 && held > options_.max_values) {
      fail("the pickle holds more than " + std::to_string(options_.max_values) +
               " values, stack entries, marks and memo entries at once (limit max_pickle_values = " +
               std::to_string(options_.max_values) + ")",
           ErrorKind::kLimit);
    }
  }

  Value* global(std::string module, std::string name) {
    check_global_name(module, name, options_.max_name_bytes);
    if (options_.on_global) options_.on_global(module, name, here());
    Value* g = graph_.make_global(std::move(module), std::move(name));
    g->set_op_offset(here());  // what the hook is told is where it is named; the analysis is told of uses
    return g;
  }

  /// An object of `how`, made by `opcode`; it takes over the references of its parts.
  Value* object(ObjectCreation how, const char* opcode, Value* callable, Value* args, Value* kwargs = nullptr) {
    Value* v = graph_.make(ValueKind::kObject);
    v->creation() = how;
    v->callable() = callable;
    v->args() = args;
    v->kwargs() = kwargs;
    v->set_op_offset(here());
    calls_.object_made(*v, here(), opcode);
    if (options_.on_object) options_.on_object(*v, here());
    return v;
  }
  /// The offset of the current opcode, as messages and the call analysis give it.
  uint64_t here() const { return options_.base_offset + op_pos_; }

  /// A tuple of `items` (whose references it takes over), held once for its owner.
  Value* tuple(std::vector<Value*> items) { return graph_.make_tuple(std::move(items)); }
  Value* owned_tuple(std::vector<Value*> items) {
    Value* t = tuple(std::move(items));
    hold(t);
    return t;
  }

  Value* int_from_le_bytes(std::span<const std::byte> bytes) {
    // Longer than 8 bytes but only sign extension past them: an int, as CPython makes it.
    while (bytes.size() > 8) {
      const uint8_t last = std::to_integer<uint8_t>(bytes.back());
      const uint8_t before = std::to_integer<uint8_t>(bytes[bytes.size() - 2]);
      if (!((last == 0x00 && before < 0x80) || (last == 0xFF && before >= 0x80))) break;
      bytes = bytes.first(bytes.size() - 1);
    }
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

  /// An INT or LONG literal, where its value is the same to every CPython
  /// (3.9 to 3.13 read INT and LONG in base 0, so `010` is 8 there and 10 in
  /// 3.14; `0x10` is 16 or an error): `[+-]?digits`, LONG with an optional
  /// `L`, no leading zero before other digits, no space. Anything else CPython
  /// may read is refused rather than read otherwise.
  Value* int_from_text(std::string_view text, bool is_long) {
    std::string s(text);
    if (is_long && !s.empty() && s.back() == 'L') s.pop_back();  // LONG's Python 2 suffix
    const size_t sign = !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0;
    const std::string_view number = std::string_view(s).substr(sign);
    if (number.empty() || number.find_first_not_of("0123456789") != std::string_view::npos) {
      fail(std::string(is_long ? "LONG" : "INT") + " literal '" + std::string(text) +
               "' is not a plain decimal (CPython reads such a text in ways that depend on its version, or refuses it)",
           ErrorKind::kUnsupported);
    }
    if (number.size() > 1 && number[0] == '0' && number.find_first_not_of('0') != std::string_view::npos) {
      fail(std::string(is_long ? "LONG" : "INT") + " literal '" + std::string(text) +
               "' has a leading zero: CPython 3.13 and older read it as octal, 3.14 as decimal",
           ErrorKind::kUnsupported);
    }
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (!s.empty() && end == s.c_str() + s.size() && errno == 0) return graph_.make_int(v);
    const size_t digits = s.size() - (!s.empty() && (s[0] == '-' || s[0] == '+'));
    if (digits > kMaxDecimalDigits) {
      fail("integer literal of " + std::to_string(digits) + " digits; Python reads at most " +
               std::to_string(kMaxDecimalDigits) + " (sys.int_info.default_max_str_digits)",
           ErrorKind::kUnsupported);
    }
    std::string bytes;
    if (!decimal_to_le_twos_complement(s, bytes)) fail("bad integer literal '" + std::string(text) + "' in pickle");
    return int_from_le_bytes(as_bytes(bytes));
  }

  /// An object is written back as CPython writes one (its APPENDS, then its
  /// SETITEMS, then its BUILDs), so a pickle that adds to an object in
  /// another order, which loads differently, is refused rather than changed.
  void refuse_out_of_order(const Value& target, const char* opcode, bool after_setitems) {
    if (target.kind != ValueKind::kObject || (target.states().empty() && !after_setitems)) return;
    fail(std::string(opcode) + " on an object after its " + (target.states().empty() ? "SETITEMS" : "BUILD") +
             ", an order CPython's pickler never writes and ckptfix could not write back",
         ErrorKind::kUnsupported);
  }
  /// Appends `items` (taking over their references) to a list or object.
  void append_to(Value* target, const std::vector<Value*>& items) {
    if (target->kind == ValueKind::kList || target->kind == ValueKind::kObject) {
      if (!items.empty()) refuse_out_of_order(*target, "APPENDS", !target->entries().empty());
      calls_.added(*target, items, CallAnalysis::Addition::kAppends, here());
      target->items.insert(target->items.end(), items.begin(), items.end());
    } else {
      for (Value* item : items) release(item);
      fail("APPEND on a value that is not a list");
    }
  }
  /// Adds key, value pairs (taking over their references) to a dict or object.
  void set_items(Value* target, const std::vector<Value*>& kv) {
    if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of stack items");
    if (target->kind != ValueKind::kDict && target->kind != ValueKind::kObject) fail("SETITEM on a value that is not a dict");
    if (!kv.empty()) refuse_out_of_order(*target, "SETITEMS", false);
    calls_.added(*target, kv, CallAnalysis::Addition::kSetItems, here());
    for (size_t i = 0; i < kv.size(); i += 2) target->entries().emplace_back(kv[i], kv[i + 1]);
  }

  /// A dict (or an object given SETITEMS: an OrderedDict) with a key set
  /// twice holds, in CPython, the last value at the first key's place;
  /// ckptfix keeps every pair as written, so such a pickle (no pickler
  /// writes one) is refused rather than read otherwise: a state dict whose
  /// torch reading is the second tensor must not be checked by the first.
  void refuse_keys_set_twice() {
    std::unordered_set<std::string> seen;
    std::string identity;
    graph_.for_each([&](const Value& v) {
      if (!v.has_parts() || v.entries().size() < 2) return;
      seen.clear();
      for (const auto& entry : v.entries()) {
        identity.clear();
        key_identity(*entry.first, identity, 0);
        if (!seen.insert(identity).second) {
          const Value& key = *entry.first;
          fail("a key set twice in one dict" +
                   (key.kind == ValueKind::kStr ? " ('" + key.text.substr(0, 200) + "')" : std::string()) +
                   ": CPython keeps the last value, ckptfix would read both; no pickler writes this",
               ErrorKind::kUnsupported);
        }
      }
    });
  }
  /// Appends to `out` what makes two dict keys one key for CPython: the
  /// value, compared as Python compares it, for keys of plain kinds (1, 1.0
  /// and True are one key; so are a str and the same text as a Python 2
  /// str), and the value itself (CPython's identity check) for any other
  /// (an object as a key is judged as a call of its __hash__ and __eq__).
  static void key_identity(const Value& key, std::string& out, int depth) {
    const auto number = [&](int64_t n) { (out += 'n') += std::to_string(n); };
    switch (key.kind) {
      case ValueKind::kNone: out += 'N'; return;
      case ValueKind::kBool: number(key.boolean ? 1 : 0); return;
      case ValueKind::kInt: number(key.integer); return;
      case ValueKind::kFloat: {
        double d;
        std::memcpy(&d, &key.float_bits, sizeof d);
        if (std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9.2e18) return number(static_cast<int64_t>(d));
        if (!std::isnan(d)) {  // NaN equals nothing, itself only by identity
          (out += 'f') += std::to_string(key.float_bits);
          return;
        }
        break;
      }
      case ValueKind::kBigInt: ((out += 'B') += std::to_string(key.text.size()) += ':') += key.text; return;
      case ValueKind::kStr:
      case ValueKind::kPyStr: ((out += 's') += std::to_string(key.text.size()) += ':') += key.text; return;
      case ValueKind::kBytes: ((out += 'b') += std::to_string(key.text.size()) += ':') += key.text; return;
      case ValueKind::kTuple:
        if (depth < 8) {
          out += '(';
          for (const Value* item : key.items) key_identity(*item, out, depth + 1);
          out += ')';
          return;
        }
        break;
      default: break;
    }
    char self[2 + 2 * sizeof(void*) + 1];
    std::snprintf(self, sizeof self, "@%p", static_cast<const void*>(&key));
    out += self;
  }

  std::span<const std::byte> in_;
  ValueGraph& graph_;
  const UnpickleOptions& options_;
  uint64_t pos_ = 0;
  uint64_t op_pos_ = 0;
  std::vector<Value*> stack_;
  std::vector<size_t> marks_;
  std::vector<Value*> memo_dense_;
  std::unordered_map<uint64_t, Value*> memo_sparse_;
  size_t memo_entries_ = 0;
  std::vector<Value*> release_pending_;
  // What loading would call; a function held as a value must never be.
  CallAnalysis calls_{[](const Value& global, GlobalKind kind, uint64_t) {
    if (kind == GlobalKind::kFunction) throw called_function_error(global.text, global.name());
  }};
  uint64_t left_in_file_ = 0;  // bytes of the payloads left in the file
  int protocol_ = 0;
  OpcodeSet opcodes_;
};

UnpickleResult Machine::run() {
  try {
    return loop();
  } catch (Error& e) {
    e.at("+" + hex_offset(options_.base_offset + op_pos_));  // errors of the hooks and checks
    throw;
  }
}

UnpickleResult Machine::loop() {
  while (true) {
    if (pos_ >= in_.size()) {
      op_pos_ = pos_;
      fail("pickle data ends before its STOP opcode (truncated)");
    }
    check_size();
    op_pos_ = pos_;
    if (options_.max_held_bytes != 0 && pos_ - left_in_file_ > options_.max_held_bytes) {
      fail("the pickle holds more than " + std::to_string(options_.max_held_bytes) +
               " bytes besides the large str and bytes payloads left in the file (limit max_pickle_bytes = " +
               std::to_string(options_.max_held_bytes) + ")",
           ErrorKind::kLimit);
    }
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
        // What the pickle leaves behind is discarded, as CPython does; the
        // root keeps the reference the stack had.
        while (!stack_.empty()) {
          release(stack_.back());
          stack_.pop_back();
        }
        memo_clear();
        refuse_keys_set_twice();
        return {root, pos_, protocol_, opcodes_, pos_ - left_in_file_, calls_.usages()};
      }

      // Stack and memo manipulation
      case op::kMark: marks_.push_back(stack_.size()); break;
      case op::kPop:
        if (stack_.size() > fence()) {
          release(pop());
        } else {
          // CPython: POP with nothing above the innermost mark discards the mark.
          for (Value* v : pop_mark()) release(v);
        }
        break;
      case op::kPopMark:
        for (Value* v : pop_mark()) release(v);
        break;
      case op::kDup: push(top()); break;
      case op::kPut: memo_put(memo_index(line(), "PUT")); break;
      case op::kBinPut: memo_put(u8()); break;
      case op::kLongBinPut: memo_put(le<uint32_t>()); break;
      case op::kMemoize: memo_put(memo_entries_); break;
      case op::kGet: push(memo_get(memo_index(line(), "GET"))); break;
      case op::kBinGet: push(memo_get(u8())); break;
      case op::kLongBinGet: push(memo_get(le<uint32_t>())); break;

      // Atoms
      case op::kNone: push(graph_.make_none()); break;
      case op::kNewTrue: push(graph_.make_bool(true)); break;
      case op::kNewFalse: push(graph_.make_bool(false)); break;
      case op::kInt: {
        // CPython: any two characters strtol reads as 0 or 1 are a bool
        // (`01`, `00`, `+1`, `-0`), pickle's protocol-0 spelling of True and False.
        const std::string_view s = line();
        const bool two_of_0_or_1 = s.size() == 2 && (s[1] == '0' || s[1] == '1') &&
                                   (s[0] == '0' || s[0] == '+' || (s[0] == '-' && s[1] == '0'));
        push(two_of_0_or_1 ? graph_.make_bool(s[1] == '1') : int_from_text(s, false));
        break;
      }
      case op::kLong: push(int_from_text(line(), true)); break;
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
        if (!is_plain_float_literal(t)) {
          fail("FLOAT literal '" + t + "' is not one CPython reads as this does (a plain decimal, inf or nan)",
               ErrorKind::kUnsupported);
        }
        char* end = nullptr;
        errno = 0;
        const double d = std::strtod(t.c_str(), &end);
        if (t.empty() || end != t.c_str() + t.size()) fail("bad FLOAT literal '" + t + "'");
        if (errno == ERANGE && std::fabs(d) >= 1.0) {
          fail("FLOAT literal '" + t + "' is too large for a float (CPython refuses it)", ErrorKind::kUnsupported);
        }
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
      case op::kBinUnicode: push(payload(ValueKind::kStr, le<uint32_t>())); break;
      case op::kShortBinUnicode: {
        const std::string_view text = as_chars(take(u8()));
        refuse_bad_utf8(text);
        push(graph_.make_str(std::string(text)));
        break;
      }
      case op::kBinUnicode8: push(payload(ValueKind::kStr, le<uint64_t>())); break;
      case op::kBinBytes: push(payload(ValueKind::kBytes, le<uint32_t>())); break;
      case op::kBinBytes8: push(payload(ValueKind::kBytes, le<uint64_t>())); break;
      case op::kShortBinBytes:
      case op::kByteArray8: {
        uint64_t n = code == op::kShortBinBytes ? u8() : le<uint64_t>();
        Value* v = graph_.make(code == op::kByteArray8 ? ValueKind::kByteArray : ValueKind::kBytes);
        v->text.assign(as_chars(take(length_arg(n))));
        push(v);
        break;
      }

      // Containers. A container takes over the stack's references to its items.
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
        append_to(top(), items);
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
        if (target->kind != ValueKind::kSet) {
          for (Value* item : items) release(item);
          fail("ADDITEMS on a value that is not a set");
        }
        calls_.added(*target, items, CallAnalysis::Addition::kAddItems, here());
        target->items.insert(target->items.end(), items.begin(), items.end());
        break;
      }
      case op::kFrozenSet: {
        Value* v = graph_.make(ValueKind::kFrozenSet);
        v->items = pop_mark();
        calls_.added(*v, v->items, CallAnalysis::Addition::kAddItems, here());  // its items are hashed
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
        // An operand left in the file is at least leave_in_file_from bytes,
        // far past any name limit: refused before it is copied.
        for (const Value* part : {module, name}) {
          if (part->in_file()) {
            fail("global " + std::string(part == module ? "module" : "name") + " is " +
                     std::to_string(part->in_file_length()) + " bytes long (limit max_name_bytes = " +
                     std::to_string(options_.max_name_bytes) + ")",
                 ErrorKind::kLimit);
          }
        }
        Value* g = global(module->text, name->text);
        release(name);
        release(module);
        push(g);
        break;
      }
      case op::kInst: {
        std::string module(line());
        std::string name(line());
        Value* cls = global(std::move(module), std::move(name));
        hold(cls);
        push(object(ObjectCreation::kReduce, "INST", cls, owned_tuple(pop_mark())));
        break;
      }
      case op::kObj: {
        std::vector<Value*> items = pop_mark();
        if (items.empty()) fail("OBJ without a class");
        Value* cls = items.front();
        items.erase(items.begin());
        push(object(ObjectCreation::kReduce, "OBJ", cls, owned_tuple(std::move(items))));
        break;
      }
      case op::kReduce: {
        Value* args = pop();
        Value* callable = pop();
        if (args->kind != ValueKind::kTuple) fail("REDUCE arguments are not a tuple");
        push(object(ObjectCreation::kReduce, "REDUCE", callable, args));
        break;
      }
      case op::kNewObj: {
        Value* args = pop();
        Value* cls = pop();
        if (args->kind != ValueKind::kTuple) fail("NEWOBJ arguments are not a tuple");
        if (cls->kind != ValueKind::kGlobal) fail("NEWOBJ of a value that is not a global (CPython needs a class)");
        push(object(ObjectCreation::kNewObj, "NEWOBJ", cls, args));
        break;
      }
      case op::kNewObjEx: {
        Value* kwargs = pop();
        Value* args = pop();
        Value* cls = pop();
        if (args->kind != ValueKind::kTuple || kwargs->kind != ValueKind::kDict) fail("NEWOBJ_EX needs a tuple and a dict");
        if (cls->kind != ValueKind::kGlobal) fail("NEWOBJ_EX of a value that is not a global (CPython needs a class)");
        push(object(ObjectCreation::kNewObjEx, "NEWOBJ_EX", cls, args, kwargs));
        break;
      }
      case op::kBuild: {
        Value* state = pop();
        Value* target = top();
        if (target->kind != ValueKind::kObject) fail("BUILD on a value that is not an object");
        calls_.added(*target, {&state, 1},
                     target->states().empty() ? CallAnalysis::Addition::kBuild : CallAnalysis::Addition::kRebuild, here());
        target->states().push_back(state);
        if (options_.on_object) options_.on_object(*target, here());
        break;
      }
      case op::kPersId: {
        const std::string_view id = line();
        if (std::any_of(id.begin(), id.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
          fail("PERSID that is not ASCII (CPython refuses it)");
        }
        Value* v = graph_.make(ValueKind::kPersistentId);
        Value* pid = graph_.make_str(std::string(id));
        hold(pid);
        v->pid() = pid;
        push(v);
        break;
      }
      case op::kBinPersId: {
        Value* pid = pop();
        Value* v = graph_.make(ValueKind::kPersistentId);
        v->pid() = pid;
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

bool is_truncated_pickle(const Error& e) {
  constexpr std::string_view kMark = "(truncated)";
  const std::string& m = e.message();
  return e.kind() == ErrorKind::kCorrupt && m.size() >= kMark.size() &&
         m.compare(m.size() - kMark.size(), kMark.size(), kMark) == 0;
}

}  // namespace ckptfix

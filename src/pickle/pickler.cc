#include "pickle/pickler.h"

#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "pickle/opcodes.h"
#include "pickle/text_codecs.h"

namespace ckptfix {
namespace {

constexpr size_t kBatchSize = 1000;  // CPython's _BATCHSIZE
constexpr int kMaxDepth = 10000;

// Protocol 2 readers map Python 2 module names to Python 3 ones
// (fix_imports), so CPython writes the Python 2 names; do the same.
std::string_view python2_module_name(std::string_view module) {
  if (module == "builtins") return "__builtin__";
  if (module == "copyreg") return "copy_reg";
  return module;
}

class Writer {
 public:
  explicit Writer(const PickleWriterOptions& options) : options_(options) {}

  std::string finish(Value* root) {
    out_ += static_cast<char>(op::kProto);
    out_ += '\x02';
    save(root);
    out_ += static_cast<char>(op::kStop);
    return std::move(out_);
  }

 private:
  void opcode(uint8_t code) { out_ += static_cast<char>(code); }

  void memoize(const Value* v) {
    const uint64_t index = memo_.size();
    memo_.emplace(v, index);
    if (index < 256) {
      opcode(op::kBinPut);
      out_ += static_cast<char>(index);
    } else {
      opcode(op::kLongBinPut);
      append_le<uint32_t>(out_, static_cast<uint32_t>(index));
    }
  }

  bool get_if_memoized(const Value* v) {
    auto it = memo_.find(v);
    if (it == memo_.end()) return false;
    if (it->second < 256) {
      opcode(op::kBinGet);
      out_ += static_cast<char>(it->second);
    } else {
      opcode(op::kLongBinGet);
      append_le<uint32_t>(out_, static_cast<uint32_t>(it->second));
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

  void write_long_bytes(const std::string& bytes) {
    if (bytes.size() < 256) {
      opcode(op::kLong1);
      out_ += static_cast<char>(bytes.size());
    } else {
      opcode(op::kLong4);
      append_le<int32_t>(out_, static_cast<int32_t>(bytes.size()));
    }
    out_ += bytes;
  }

  void write_unicode(std::string_view utf8) {
    opcode(op::kBinUnicode);
    append_le<uint32_t>(out_, static_cast<uint32_t>(utf8.size()));
    out_ += utf8;
  }

  void write_global(std::string_view module, std::string_view name) {
    // GLOBAL ends module and name with a newline; protocol 4's STACK_GLOBAL
    // can carry one, protocol 2 cannot (no importable module or attribute has one).
    if (module.find('\n') != std::string_view::npos || name.find('\n') != std::string_view::npos) {
      throw Error(ErrorKind::kUnsupported, "the global '" + std::string(module) + "." + std::string(name) +
                                               "' has a line break in its name, which a protocol-2 pickle cannot write");
    }
    opcode(op::kGlobal);
    out_ += python2_module_name(module);
    out_ += '\n';
    out_ += name;
    out_ += '\n';
  }

  // Values protocol 2 cannot spell directly are written as the call CPython
  // uses for them; `v` (the call's result) is memoized unless null.
  void write_synthetic_call(const Value* v, std::string_view module, std::string_view name,
                            const std::function<void()>& write_args) {
    write_global(module, name);
    write_args();
    opcode(op::kReduce);
    if (v != nullptr) memoize(v);
  }

  void write_bytes(const Value* v, const std::string& payload) {
    if (payload.empty()) {
      write_synthetic_call(v, "builtins", "bytes", [&] { opcode(op::kEmptyTuple); });
      return;
    }
    write_synthetic_call(v, "_codecs", "encode", [&] {
      write_unicode(latin1_to_utf8(payload));
      write_unicode("latin1");
      opcode(op::kTuple2);
    });
  }

  void batch_appends(const std::vector<Value*>& items, int depth) {
    for (size_t i = 0; i < items.size(); i += kBatchSize) {
      const size_t n = std::min(kBatchSize, items.size() - i);
      if (n == 1 && !options_.libtorch) {
        save(items[i], depth);
        opcode(op::kAppend);
      } else {
        opcode(op::kMark);
        for (size_t k = 0; k < n; ++k) save(items[i + k], depth);
        opcode(op::kAppends);
      }
    }
  }

  void batch_setitems(const std::vector<std::pair<Value*, Value*>>& entries, int depth) {
    for (size_t i = 0; i < entries.size(); i += kBatchSize) {
      const size_t n = std::min(kBatchSize, entries.size() - i);
      if (n == 1 && !options_.libtorch) {
        save(entries[i].first, depth);
        save(entries[i].second, depth);
        opcode(op::kSetItem);
      } else {
        opcode(op::kMark);
        for (size_t k = 0; k < n; ++k) {
          save(entries[i + k].first, depth);
          save(entries[i + k].second, depth);
        }
        opcode(op::kSetItems);
      }
    }
  }

  void save(Value* v, int depth = 0) {
    if (depth > kMaxDepth) {
      throw Error(ErrorKind::kUnsupported, "object graph is nested more than " + std::to_string(kMaxDepth) + " levels deep");
    }
    ++depth;
    if (get_if_memoized(v)) return;
    switch (v->kind) {
      case ValueKind::kNone: opcode(op::kNone); return;
      case ValueKind::kBool: opcode(v->boolean ? op::kNewTrue : op::kNewFalse); return;
      case ValueKind::kInt: write_int(v->integer); return;
      case ValueKind::kBigInt:
        if (options_.libtorch) throw Error(ErrorKind::kUnsupported, "LibTorch cannot read integers beyond 64 bits");
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
          append_le<int32_t>(out_, static_cast<int32_t>(v->text.size()));
        }
        out_ += v->text;
        memoize(v);
        return;
      case ValueKind::kBytes: write_bytes(v, v->text); return;
      case ValueKind::kByteArray:
        write_synthetic_call(v, "builtins", "bytearray", [&] {
          write_bytes(nullptr, v->text);
          opcode(op::kTuple1);
        });
        return;
      case ValueKind::kTuple: save_tuple(v, depth); return;
      case ValueKind::kList:
        opcode(op::kEmptyList);
        memoize(v);
        batch_appends(v->items, depth);
        return;
      case ValueKind::kDict:
        opcode(op::kEmptyDict);
        memoize(v);
        batch_setitems(v->entries, depth);
        return;
      case ValueKind::kSet:
      case ValueKind::kFrozenSet:
        write_synthetic_call(v, "builtins", v->kind == ValueKind::kSet ? "set" : "frozenset", [&] {
          opcode(op::kEmptyList);
          batch_appends(v->items, depth);
          opcode(op::kTuple1);
        });
        return;
      case ValueKind::kGlobal:
        write_global(v->text, v->name);
        memoize(v);
        return;
      case ValueKind::kObject: save_object(v, depth); return;
      case ValueKind::kPersistentId:
        if (!options_.persistent_id) {
          throw Error(ErrorKind::kUnsupported, "persistent id without a writer for it");
        }
        options_.persistent_id(*v, [&](Value* pid) { save(pid, depth); });
        opcode(op::kBinPersId);
        return;
    }
  }

  void save_tuple(Value* v, int depth) {
    const auto& items = v->items;
    if (items.empty()) {
      opcode(op::kEmptyTuple);  // CPython never memoizes the empty tuple
      return;
    }
    if (!in_progress_.insert(v).second) {
      throw Error(ErrorKind::kUnsupported, "a tuple contains itself, which protocol 2 cannot express");
    }
    if (items.size() > 3) opcode(op::kMark);
    for (Value* item : items) save(item, depth);
    in_progress_.erase(v);
    if (memo_.count(v)) {
      // A cycle through a list or dict reached this tuple while its items
      // were being written; CPython then discards the copy. Reject instead.
      throw Error(ErrorKind::kUnsupported, "a tuple is reachable from its own items, which is not supported");
    }
    static constexpr uint8_t kSmall[] = {0, op::kTuple1, op::kTuple2, op::kTuple3};
    opcode(items.size() <= 3 ? kSmall[items.size()] : op::kTuple);
    memoize(v);
  }

  void save_object(Value* v, int depth) {
    if (!in_progress_.insert(v).second) {
      throw Error(ErrorKind::kUnsupported, "an object is an argument of its own constructor");
    }
    switch (v->creation) {
      case ObjectCreation::kReduce:
        save(v->callable, depth);
        save(v->args, depth);
        opcode(op::kReduce);
        break;
      case ObjectCreation::kNewObj:
        save(v->callable, depth);
        save(v->args, depth);
        opcode(op::kNewObj);
        break;
      case ObjectCreation::kNewObjEx:
        // Protocol 2 has no NEWOBJ_EX: copyreg.__newobj_ex__(cls, args, kwargs).
        write_global("copyreg", "__newobj_ex__");
        save(v->callable, depth);
        save(v->args, depth);
        save(v->kwargs, depth);
        opcode(op::kTuple3);
        opcode(op::kReduce);
        break;
    }
    in_progress_.erase(v);
    memoize(v);
    if (!v->items.empty()) batch_appends(v->items, depth);
    if (!v->entries.empty()) batch_setitems(v->entries, depth);
    for (Value* state : v->states) {
      save(state, depth);
      opcode(op::kBuild);
    }
  }

  const PickleWriterOptions& options_;
  std::string out_;
  std::unordered_map<const Value*, uint64_t> memo_;
  std::unordered_set<const Value*> in_progress_;
};

}  // namespace

std::string pickle_protocol2(Value* root, const PickleWriterOptions& options) {
  Writer writer(options);
  return writer.finish(root);
}

}  // namespace ckptfix

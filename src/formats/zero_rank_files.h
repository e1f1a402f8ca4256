// DeepSpeed ZeRO, stage 2 of reading a tag directory: reading its rank
// files' pickles as data (never called), their partitions and DeepSpeed's
// records of the parameters (zero_format.cc has the whole picture).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckptfix/error.h"
#include "model/checkpoint_impl.h"

namespace ckptfix::zero {

inline Error corrupt(const std::string& message) { return Error(ErrorKind::kCorrupt, message); }

// ---------------------------------------------------------------------------
// Reading DeepSpeed's pickles as data.

// The value under `key` of a dict (plain or OrderedDict), or null.
const Value* entry(const Value* dict, std::string_view key);

inline bool is_none(const Value* v) { return v == nullptr || v->kind == ValueKind::kNone; }

// A dict's str keys -> values, for lookups by name (a model with thousands
// of frozen parameters would make entry() quadratic).
std::map<std::string_view, const Value*> by_name(const Value* dict);

const Value* lookup(const std::map<std::string_view, const Value*>& names, const std::string& key);

// One opened file of the set, with what messages name it by.
struct OpenedFile {
  std::optional<Checkpoint> checkpoint;
  uint32_t input = 0;  // CheckpointImpl::file (0) or shards[input - 1]
  std::string name;    // the file's path, for messages

  const CheckpointImpl& impl() const { return impl_of(*checkpoint); }
  const Value* root() const { return impl().root; }
  /// The file itself (its checkpoint's own input).
  const std::shared_ptr<const InputFile>& file() const { return impl().file; }
  Error error(ErrorKind kind, const std::string& message, const std::string& at) const {
    Error e(kind, message);
    e.in_file(name);
    if (!at.empty()) e.at(at);
    return e;
  }
  const Value* require(const Value* dict, std::string_view key, const std::string& what) const {
    const Value* v = entry(dict, key);
    if (v == nullptr) {
      throw error(ErrorKind::kCorrupt, "it has no '" + std::string(key) + "' (is it a DeepSpeed " + what + " file?)", "");
    }
    return v;
  }
  int64_t integer(const Value* v, const std::string& at) const {
    if (v == nullptr || v->kind != ValueKind::kInt) throw error(ErrorKind::kCorrupt, "expected an int", at);
    return v->integer;
  }
  // A torch.Size(...) object, or a tuple/list of ints: a shape.
  std::vector<int64_t> shape(const Value* v, const std::string& at) const {
    if (v != nullptr && v->kind == ValueKind::kObject && v->callable() != nullptr &&
        v->callable()->is_global("torch", "Size") && v->args() != nullptr && v->args()->items.size() == 1) {
      v = v->args()->items[0];
    }
    if (v == nullptr || (v->kind != ValueKind::kTuple && v->kind != ValueKind::kList)) {
      throw error(ErrorKind::kCorrupt, "expected a torch.Size", at);
    }
    std::vector<int64_t> dims;
    for (const Value* d : v->items) {
      if (d->kind != ValueKind::kInt || d->integer < 0) throw error(ErrorKind::kCorrupt, "a size is not a non-negative int", at);
      dims.push_back(d->integer);
    }
    return dims;
  }
  // The tensor a value is (a plain, dense tensor with its storage in this file).
  const Tensor& tensor(const Value* v, const std::string& at) const {
    const Tensor* t = v == nullptr ? nullptr : impl().tensor_of(v);
    if (t == nullptr || t->kind != TensorKind::kDense || t->storage < 0) {
      throw error(ErrorKind::kCorrupt, "expected a tensor", at);
    }
    return *t;
  }
  const Storage& storage(const Tensor& t) const { return impl().storages[static_cast<size_t>(t.storage)]; }
};

// Elements of a shape, refusing a product past 2^62.
uint64_t checked_numel(const std::vector<int64_t>& shape, const OpenedFile& f, const std::string& at);

// A rank's flat partition: a 1-D tensor over a stored storage record.
struct Partition {
  const OpenedFile* file = nullptr;
  std::shared_ptr<const InputFile> input;
  uint64_t numel = 0;           // elements of the partition tensor
  uint64_t storage_offset = 0;  // of the tensor in its storage, in elements
  uint64_t record_offset = 0;   // the storage record's first byte in the file
  uint64_t record_bytes = 0;
  uint32_t crc32 = 0;
  DType dtype = DType::kFloat32;
  std::string what;
  /// Salvage: why its bytes are lost (its rank's file missing or damaged,
  /// its record's CRC-32 wrong); empty when they are there.
  std::string lost;
};

Partition partition(const OpenedFile& f, const Value* v, const std::string& what);

// The parameters of param_shapes: each group an ordered dict name -> size.
struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t numel = 0;
};
std::vector<std::vector<ParamShape>> param_shapes(const OpenedFile& model);

std::vector<std::string> str_list(const OpenedFile& f, const Value* v, const std::string& at);

// ZeroStageEnum(N), as Python 3.12+ (and up to 3.10) pickle an enum
// member; getattr(ZeroStageEnum, 'gradients'), as Python 3.11 does; or a
// plain int: the stage.
int64_t zero_stage(const OpenedFile& f, const Value* v);


}  // namespace ckptfix::zero

// Recognising torch's objects in a value graph: storages (persistent ids)
// and tensors (_rebuild_tensor* calls, Parameters, quantized tensors).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "model/checkpoint_impl.h"

namespace ckptfix {

/// The fields of a torch storage persistent id:
/// ('storage', <storage class>, key, location, numel[, view_metadata]).
struct StoragePid {
  std::string class_module;  ///< "torch" (or "torch.cuda" in very old files)
  std::string class_name;    ///< "FloatStorage", "UntypedStorage", ...
  std::string key;
  std::string location;
  uint64_t numel = 0;
  const Value* view_metadata = nullptr;  ///< legacy 6th field; must be None
};

/// Parses a persistent id value. Returns nullopt when it is not a storage
/// id (e.g. the legacy ('module', ...) ids); throws Error(kCorrupt) when it
/// claims to be a storage but is malformed.
std::optional<StoragePid> parse_storage_pid(const Value& pid);

/// The bytes of one element of the storage `pid` describes: its storage
/// class's dtype (1 for UntypedStorage), or 1 for a class no dtype has
/// (the storage table refuses those; readers sizing records before it use this).
uint32_t storage_element_size(const StoragePid& pid);

/// torch names its storages "0", "1", ... in the order it meets them: for
/// such a key (decimal, no leading zero) below `bound`, its number, so that
/// tables of storages and of their records can be indexed by it instead of
/// hashed; nullopt for any other key (looked up by name as before).
std::optional<uint32_t> storage_number(std::string_view key, size_t bound);

/// Where a storage's data is and how many bytes are actually there.
struct LocatedData {
  StorageSource source;
  uint64_t available = 0;  ///< bytes of (uncompressed) data present for it
};

/// Builds impl.storages from every storage persistent id in the graph and
/// points each kPersistentId value at its storage. `locate(key)` finds the
/// data of a key (throws if absent). Checks the sizes agree.
void build_storage_table(CheckpointImpl& impl, const std::function<LocatedData(const std::string& key)>& locate);

/// Makes `call` (a value of `graph`) the call torch.save writes for a tensor
/// over the storage `storage` (of `storages`): _rebuild_tensor_v2(pid, offset,
/// shape, stride, requires_grad, OrderedDict()), or for a storage saved
/// untyped _rebuild_tensor_v3 with the dtype as its last argument.
/// `ordered_dict`: the collections.OrderedDict global to reuse (the pickle
/// then refers to it by memo, as CPython does), or null to make one.
void make_rebuild_call(ValueGraph& graph, Value& call, const std::vector<Storage>& storages, int32_t storage,
                       int64_t offset, const std::vector<int64_t>& shape, const std::vector<int64_t>& stride,
                       bool requires_grad, Value* ordered_dict = nullptr);

/// The strides of a contiguous (row-major) tensor of `shape`, as torch
/// gives them (a size of 0 steps like 1).
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

/// Whether the view is row-major with no gaps, as torch's is_contiguous()
/// judges it (the stride of a dimension of size 1 does not matter).
bool is_contiguous(const TensorInfo& t);

/// Starts a checkpoint no pickle describes (built in memory, read from a
/// safetensors file or a shard set): laid out, when written as a torch zip,
/// as the newest torch saves (root folder "archive", its records, protocol
/// 2). Returns its root, an empty `OrderedDict()` for the caller to fill.
Value* begin_built_state_dict(CheckpointImpl& impl);

/// Records the globals a state dict of _rebuild_tensor_v2/_v3 calls over
/// `impl.storages` names (for checkpoints built without a pickle: in memory,
/// from safetensors files, from shard sets).
void note_state_dict_globals(CheckpointImpl& impl);

/// Builds impl.tensors from the rebuild calls in the graph.
void build_tensor_table(CheckpointImpl& impl);

/// The function a tensor's rebuild calls (the Global _rebuild_tensor_v2,
/// ...) and its arguments: the call's own, or for a tensor with Python
/// attributes, _rebuild_from_type_v2(func, type, args, state)'s func and args.
const Value& rebuild_function(const Tensor& t);
const std::vector<Value*>& rebuild_arguments(const Tensor& t);
/// Makes the tensor's rebuild `function(*arguments)`, in whichever form it
/// has (the attributes of a tensor that has them are kept). Values the
/// pickle may share with other tensors (the argument tuples) are replaced,
/// never mutated.
void set_rebuild(ValueGraph& graph, Tensor& t, Value* function, std::vector<Value*> arguments);

/// What is wrong with a tensor's view of its storage (sizes and strides that
/// do not match, are negative or overflow, or reach past the storage), or
/// nullopt when it fits.
std::optional<std::string> tensor_view_problem(const Tensor& t, const Storage& s);

/// What is wrong with a meta tensor's sizes and strides (no storage to fit),
/// or nullopt.
std::optional<std::string> meta_view_problem(const Tensor& t);

/// Checks every tensor reachable from the root fits inside its storage;
/// errors name the tensor's path.
void validate_tensor_views(const Checkpoint& checkpoint);

}  // namespace ckptfix

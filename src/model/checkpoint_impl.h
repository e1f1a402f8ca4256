// The private state behind ckptfix::Checkpoint, shared by the readers (which
// fill it), the passes (which edit it) and the writer (which serializes it).
// Library users see it only through the read-only views of checkpoint.h.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "cast_rules.h"
#include "io/input_file.h"
#include "model/preparsed_pickle.h"
#include "pickle/call_analysis.h"
#include "pickle/pointer_set.h"
#include "pickle/value.h"
#include "zip/gather_reader.h"
#include "zip/zip_reader.h"

namespace ckptfix {

/// The records torch's writer put into the input beside data.pkl, data/<key>
/// and version, which decide how the output is laid out (docs/format.md,
/// "Records").
struct ArchiveStyle {
  /// `.format_version` >= 1 (torch >= 2.7): written again with
  /// `.storage_alignment`, storages in key order with exactly torch's
  /// padding, so that `calculate_storage_offsets` finds them. Without it,
  /// storage records go in the string order of their keys (torch <= 2.6).
  bool format_version = false;
  /// Data alignment: the input's `.storage_alignment` when it is a multiple
  /// of 64 up to 65536 (torch's `config.save.storage_alignment`), else 64.
  uint32_t storage_alignment = 64;
  /// `.data/serialization_id` (torch >= 2.1): written again, computed as torch does.
  bool serialization_id = false;

  /// What the newest torch writes (for checkpoints built in memory).
  static ArchiveStyle newest() { return {true, 64, true}; }
};

/// A storage with what the passes decide for it.
struct Storage : StorageInfo {
  /// Which input file holds its bytes: 0 for CheckpointImpl::file, k for
  /// CheckpointImpl::shards[k - 1] (checkpoints read from a shard set).
  uint32_t input = 0;
  /// kGathered: where the chunks of the tensor are (zip/gather_reader.h).
  std::shared_ptr<const GatherPlan> gather;
  /// Set by the cast pass: the element type to write instead of `dtype`,
  /// converted by the rules of the torch release the output is for.
  std::optional<DType> cast_to;
  CastRules cast_rules;
  /// The element type written to the output.
  DType output_dtype() const { return cast_to.value_or(dtype); }
  /// Bytes written to the output.
  uint64_t output_nbytes() const;
};

/// A tensor with the graph values it is made of.
struct Tensor : TensorInfo {
  Value* value = nullptr;    ///< the graph value that *is* the tensor (the Parameter when wrapped)
  /// The _rebuild_tensor* call; for a tensor with Python attributes
  /// (`from_type`) the _rebuild_from_type_v2 call, whose arguments hold
  /// the rebuild function and its arguments apart. Read and change the
  /// rebuild through rebuild_function, rebuild_arguments and set_rebuild
  /// (model/torch_objects.h), which know both forms.
  Value* rebuild = nullptr;
  /// `rebuild` is _rebuild_from_type_v2(func, type, args, state).
  bool from_type = false;
  Value* dtype_arg = nullptr;///< the dtype Global argument of _rebuild_tensor_v3, if any
};

/// A state dict with its graph value.
struct StateDict : StateDictInfo {
  Value* dict = nullptr;  ///< kDict or an OrderedDict kObject
};

/// What salvage (include/ckptfix/salvage.h) learns while a reader reads a
/// damaged file: the readers keep going past damage and say what is lost.
struct SalvageLog {
  struct Lost {
    std::string key;      ///< the tensor's path ('/'-separated)
    std::string storage;  ///< the storage or record it needed
    uint64_t bytes = 0;
    std::string reason;
  };
  /// Storage key -> why its bytes are lost (the readers of torch files);
  /// prune_lost_tensors then takes the tensors over them out of the graph.
  std::map<std::string, std::string> lost_storages;
  /// How lost tensors name their storage: this prefix and the key (a torch
  /// zip: "archive/data/", its record), or when empty "storage 'KEY'".
  std::string storage_record_prefix;
  /// The tensors lost, in the order of the object.
  std::vector<Lost> lost;
  /// Where the records came from ("central directory", "local headers", ...).
  std::string found_by;
  /// What else the reader had to decide (a damaged small record replaced by
  /// torch's default).
  std::vector<std::string> notes;
};

/// module.name judged by the policy (pickle/global_policy.h): its kind,
/// the first torch release that allows it, whether torch 1.13 has it; its
/// use left at kReferenced and no place.
GlobalRef judged_global(const std::string& module, const std::string& name);

/// ReadLimits::max_pickle_values, or its default for a file of `file_size` bytes.
uint64_t max_pickle_values(const ReadLimits& limits, uint64_t file_size);

struct CheckpointImpl {
  std::shared_ptr<const InputFile> file;
  /// Set by salvage_checkpoint: readers log damage here and go on.
  SalvageLog* salvage = nullptr;
  /// The other files a shard set's storages are in (see Storage::input).
  std::vector<std::shared_ptr<const InputFile>> shards;
  std::unique_ptr<ZipReader> zip;  // null for legacy files
  CheckpointFormat format = CheckpointFormat::kZip;
  std::string archive_root;
  ArchiveStyle style;  // legacy inputs: the default (torch 1.x's records)
  bool big_endian = false;
  int protocol = 0;
  ValueGraph graph;
  Value* root = nullptr;
  std::vector<Storage> storages;
  std::vector<Tensor> tensors;
  PointerMap<Value, size_t> tensor_by_value;  // a tensor's (or Parameter's) value -> its index in `tensors`
  std::vector<GlobalRef> globals;
  std::unordered_map<std::string, size_t> global_index;  // of `globals`, to record each once
  /// The record holding the object pickle ("archive/data.pkl"), for the
  /// places pickle_place() names; empty for a legacy file, whose offsets are
  /// in the file.
  std::string pickle_record;
  OpcodeSet opcodes;
  ReadLimits limits;
  /// OpenOptions::leave_payloads_in_file: the reader leaves large str and
  /// bytes payloads of a stored data.pkl in the file (Value::in_file).
  bool leave_payloads_in_file = false;
  /// OpenOptions::make_values_ahead.
  bool make_values_ahead = true;
  /// With leave_payloads_in_file: bytes of the object pickle in memory, the
  /// parsed opcodes plus every payload read in since (model/payloads.h), so
  /// that together they stay within ReadLimits::max_pickle_bytes.
  uint64_t pickle_bytes_held = 0;
  /// Payloads may still be in the file, to be read in (model/payloads.h).
  bool payloads_in_file = false;
  /// A save's verification: its data.pkl, parsed while the rest of the file
  /// was written, taken by the reader where the archive has that very
  /// record (model/preparsed_pickle.h); unset otherwise.
  PreparsedPickleSource preparsed;
  /// Bytes of storages the passes made (numpy arrays turned into tensors),
  /// which kMemory sources point into; a deque, so they never move.
  std::deque<std::string> owned_bytes;
  /// A distributed checkpoint's items (its tensors' chunks and its other
  /// values), each a torch.save zip inside a .distcp file: verify checks
  /// their CRCs.
  struct EmbeddedZip {
    std::shared_ptr<const InputFile> file;  ///< the zip, as a slice of its .distcp file
    std::string what;                       ///< "chunk at [0,4] of tensor 'w' (… bytes at offset …)"
  };
  std::vector<EmbeddedZip> embedded_zips;
  /// A DeepSpeed ZeRO checkpoint: what its files say of the run.
  std::optional<ZeroRunInfo> zero;
  /// A safetensors input's `__metadata__` (written again when the output is
  /// safetensors too); nullopt when it has none or is not safetensors.
  std::optional<std::vector<std::pair<std::string, std::string>>> safetensors_metadata;

  /// Set by open_data_file: a known gadget is recorded, not refused.
  bool gadgets_as_data = false;
  /// The on_global hook of the readers: refuses a known gadget (Error
  /// kUnsafe) unless gadgets_as_data, and records any other global the
  /// first time it is seen.
  /// Returns the new record the first time a global is seen, else nullptr.
  GlobalRef* note_global(const std::string& module, const std::string& name);
  /// Records the uses a pickle makes of its globals (UnpickleResult::globals),
  /// keeping each global's strongest; `place` names an offset in that pickle.
  void note_usages(const std::vector<GlobalUsage>& usages, const std::function<std::string(uint64_t)>& place);
  /// Records the use `used` makes of a global, keeping each global's strongest.
  void note_use(const GlobalRef& used);
  /// An offset in the object pickle, as errors name places
  /// ("archive/data.pkl+0x1a3", "offset 0x1a3 (legacy object pickle)");
  /// empty for kNoOffset.
  std::string pickle_place(uint64_t offset) const;
  /// ReadLimits::max_walk_steps, or its default for this graph.
  uint64_t walk_steps() const;
  /// ReadLimits::max_pickle_values, or its default for this file.
  uint64_t pickle_values() const;
  /// The file holding a storage's bytes.
  const InputFile& input_of(const Storage& s) const { return s.input == 0 ? *file : *shards.at(s.input - 1); }
  /// The tensor whose value is v, or nullptr.
  const Tensor* tensor_of(const Value* v) const;
  /// Every state dict reachable from the root (computed from the current graph).
  std::vector<StateDict> state_dicts() const;
};

/// The door to a Checkpoint's insides, for ckptfix's own code only.
struct CheckpointAccess {
  static CheckpointImpl& impl(Checkpoint& c) { return *c.impl_; }
  static const CheckpointImpl& impl(const Checkpoint& c) { return *c.impl_; }
  static Checkpoint adopt(std::unique_ptr<CheckpointImpl> impl) { return Checkpoint(std::move(impl)); }
};

inline CheckpointImpl& impl_of(Checkpoint& c) { return CheckpointAccess::impl(c); }
inline const CheckpointImpl& impl_of(const Checkpoint& c) { return CheckpointAccess::impl(c); }

}  // namespace ckptfix

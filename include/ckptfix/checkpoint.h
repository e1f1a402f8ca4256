// A torch.save checkpoint opened without running any of its pickle code.
//
// Opening reads the archive directory (zip) or the leading pickles (legacy
// stream format), parses the object pickle into a ValueGraph, and builds a
// table of storages (where each one's bytes are in the file) and a table of
// tensors (which storage, dtype, shape, strides, offset). Tensor bytes stay
// on disk: they are read, streamed or mapped on request.
//
// The Checkpoint is opaque: callers see read-only tables of storages and
// tensors, the state dicts by path and the globals, and change it only
// through the library's functions (apply_passes in passes.h), which keep
// its invariants; save() (save.h) writes it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ckptfix/dtype.h"
#include "ckptfix/globals.h"
#include "ckptfix/span.h"
#include "ckptfix/torch_version.h"

namespace ckptfix {

/// The library's private state behind a Checkpoint.
struct CheckpointImpl;

/// The container format of a checkpoint file.
enum class CheckpointFormat {
  kZip,     ///< torch >= 1.6 default (`_use_new_zipfile_serialization=True`)
  kLegacy,  ///< the stream format of torch < 1.6 (still writable with `_use_new_zipfile_serialization=False`)
  kSafetensors,  ///< a `.safetensors` file: a JSON header and raw tensor bytes (read as an OrderedDict of tensors)
  kShardIndex,   ///< a Hugging Face shard set's index (`model.safetensors.index.json`, `pytorch_model.bin.index.json`)
  kDcp,          ///< a torch.distributed.checkpoint directory (`.metadata` and `__<rank>_<n>.distcp` files)
  kZero,         ///< a DeepSpeed ZeRO checkpoint directory (`*_model_states.pt` and every rank's `*_optim_states.pt`)
};

/// What a DeepSpeed ZeRO checkpoint's files say of the run that wrote it.
struct ZeroRunInfo {
  int stage = 0;               ///< ZeRO stage: 1, 2 or 3
  uint32_t ranks = 0;          ///< data-parallel ranks (one optimizer file each)
  bool bf16_files = false;     ///< bf16_zero_pp_rank_* optimizer files (bf16 training)
  std::string deepspeed_version;  ///< ds_version
  std::string tag;             ///< the tag directory's name ("global_step1000")
};

/// Whether `dir` is a directory that Checkpoint::open reads as one
/// checkpoint: a torch.distributed.checkpoint directory (it has `.metadata`),
/// a DeepSpeed checkpoint directory (it has `latest`, naming a tag directory
/// beside it) or a DeepSpeed tag directory (it has rank 0's model states).
bool is_checkpoint_directory(const std::filesystem::path& dir);

/// "zip", "legacy", "safetensors", "shard index", "distributed (DCP)" or "DeepSpeed ZeRO".
std::string_view format_name(CheckpointFormat format);

/// Where a storage's bytes are in the input file.
struct StorageSource {
  /// How a storage's bytes are held.
  enum class Encoding {
    kStored,    ///< raw bytes at offset in the file
    kDeflated,  ///< a deflated zip record at offset
    kMemory,    ///< raw bytes at `memory` (a checkpoint built in memory, e.g. from LibTorch tensors)
    /// At offset, `length` bytes of UTF-8 text whose code points (0 to 255)
    /// are the bytes: a numpy array's bytes as pickle protocol 2 holds them
    /// (_codecs.encode(str, 'latin1')), decoded as they are read.
    kLatin1Text,
    kGathered,  ///< assembled from the chunks of a distributed checkpoint (each in a .distcp file)
  };
  Encoding encoding = Encoding::kStored;  ///< how the bytes are stored
  const std::byte* memory = nullptr;  ///< kMemory: the bytes (owned by whoever built the checkpoint)
  uint64_t offset = 0;         ///< file offset of the first (possibly compressed) byte
  uint64_t length = 0;         ///< bytes at offset (compressed length when deflated)
  uint32_t crc32 = 0;          ///< CRC recorded by the archive (0: none recorded)
  std::string record;          ///< "archive/data/0", or "storage '1234' data" for legacy files
};

/// One storage: a contiguous run of elements that tensors view, as the
/// input holds it (read_storage() reads these bytes; a cast planned by
/// apply_passes changes what is written, not this description).
struct StorageInfo {
  std::string key;        ///< key in the input (record name under data/ for zip files)
  DType dtype = DType::kUInt8;  ///< element type of the bytes in the input
  bool untyped = false;   ///< saved as torch.UntypedStorage (numel counts bytes)
  uint64_t numel = 0;     ///< element count as the persistent id states it
  uint64_t nbytes = 0;    ///< bytes of data in the input
  std::string location;   ///< saved location tag: "cpu", "cuda:0", "mps", ...
  bool big_endian = false;  ///< the input holds the bytes big-endian
  StorageSource source;   ///< where the bytes are
};

/// How a tensor was saved.
enum class TensorKind {
  kDense,      ///< _rebuild_tensor / _rebuild_tensor_v2 / _rebuild_tensor_v3
  kQuantized,  ///< _rebuild_qtensor (bytes are carried, never cast)
  /// _rebuild_meta_tensor_no_storage: a tensor on the meta device (a model
  /// built with device="meta", torch.save(model.to("meta").state_dict())),
  /// with a dtype, shape and strides but no data and no storage (storage -1).
  kMeta,
};

/// One tensor of the checkpoint, with everything torch will rebuild it from
/// (after apply_passes: as it will be written).
struct TensorInfo {
  int32_t storage = -1;      ///< index into Checkpoint::storages(); -1 for a meta tensor, which has none
  DType dtype = DType::kFloat32;  ///< element type (after a cast: the type written)
  int64_t storage_offset = 0;  ///< in elements
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;  ///< in elements
  bool requires_grad = false;  ///< requires_grad as saved
  bool parameter = false;    ///< wrapped in torch.nn.Parameter
  /// Saved with Python attributes (`t.foo = 1`, DeepSpeed's `ds_id`): torch
  /// 2.x pickles such a tensor through torch._tensor._rebuild_from_type_v2,
  /// which sets them again on load. The attributes are kept by every pass.
  bool python_attributes = false;
  TensorKind kind = TensorKind::kDense;  ///< how torch rebuilds it

  /// Elements of the tensor (the product of its shape).
  uint64_t numel() const;
  /// Bytes the tensor's elements occupy (numel × element size).
  uint64_t nbytes() const;
};

/// One step of a path from the root: a dict key (or attribute name) or an index.
using PathElement = std::variant<std::string, int64_t>;
/// A position in the object graph: the steps from the root.
using Path = std::vector<PathElement>;

/// Renders a path for messages and --key: state_dict/conv.weight, list/0.
std::string path_to_string(const Path& path);

/// Where a tensor appears: one entry per position in the graph, so a tensor
/// referenced from two places appears twice.
struct TensorPosition {
  Path path;          ///< from the root
  size_t tensor = 0;  ///< index into Checkpoint::tensors()
};

/// A dict (plain or OrderedDict), ignoring `_metadata`, that
/// nn.Module.load_state_dict takes, as model.state_dict() produces it:
/// every key a string, every value a tensor (dense, quantized, sparse), or,
/// under a key whose last segment is `_extra_state`, any value (a module's
/// get_extra_state()); at least one tensor (state_dict.h).
struct StateDictInfo {
  Path path;             ///< from the root; empty for the root itself
  bool in_optimizer = false;  ///< found inside an optimizer state ({state, param_groups})
  size_t size = 0;       ///< entries
  std::vector<std::string> keys;  ///< the entries' keys, in order
  size_t sparse_tensors = 0;  ///< entries that are sparse tensors
  size_t extra_states = 0;    ///< entries under an `_extra_state` key that are not tensors
};

/// A global the pickle names, and how it is judged. A checkpoint that names
/// a known gadget does not open, so `kind` is never kGadget here.
struct GlobalRef {
  std::string module;  ///< e.g. "collections"
  std::string name;    ///< e.g. "OrderedDict"
  GlobalKind kind = GlobalKind::kUnknown;  ///< how ckptfix judges it
  /// What loading the file does with it: the strongest use of it anywhere
  /// (a call, an instance made without a call, or only held).
  GlobalUse use = GlobalUse::kReferenced;
  /// Where that use is first made: the pickle and the opcode's offset, as
  /// errors name places ("archive/data.pkl+0x1a3"); empty when unknown.
  std::string where;
  /// How it is used there: "REDUCE", "NEWOBJ", "NEWOBJ with arguments",
  /// "in the arguments of a call", "named", ...
  std::string how;
  /// kWeightsOnly: the first torch release whose allowlist has it.
  TorchVersion allowed_since{2, 6};
  /// False for a torch global that torch 1.13 does not have (float8 dtypes,
  /// _rebuild_tensor_v3, ...): 1.13's torch.load fails on it.
  bool exists_in_torch_1_13 = true;
  /// torch.load(weights_only=True), the default since torch 2.6, accepts it
  /// in `torch` (default: the newest release ckptfix models).
  bool weights_only(TorchVersion torch = default_torch_version()) const {
    return kind == GlobalKind::kWeightsOnly && allowed_since <= torch;
  }
  /// The default torch.load of `torch` accepts it: by its weights_only
  /// allowlist from 2.6 on; before (1.13, weights_only=False), when that
  /// torch has it at all.
  bool default_load_accepts(TorchVersion torch = default_torch_version()) const {
    return weights_only_by_default(torch) ? weights_only(torch) : exists_in_torch_1_13;
  }
  /// "module.name".
  std::string dotted() const { return module + "." + name; }
};

/// A read-only, random-access view of one of a checkpoint's tables
/// (storages(), tensors()); valid while the checkpoint lives and is not
/// changed by apply_passes.
template <typename T>
class TableView {
 public:
  /// How the view reaches element i of the table it shows.
  using Accessor = const T& (*)(const void* table, size_t i);
  TableView(const void* table, size_t size, Accessor at) : table_(table), size_(size), at_(at) {}

  /// Elements in the table.
  size_t size() const { return size_; }
  /// Whether the table is empty.
  bool empty() const { return size_ == 0; }
  /// Element i (unchecked, like std::vector::operator[]).
  const T& operator[](size_t i) const { return at_(table_, i); }

  /// Iterates the elements in order.
  class iterator {
   public:
    using value_type = T;  ///< for standard algorithms
    using difference_type = std::ptrdiff_t;  ///< for standard algorithms
    iterator(const TableView* view, size_t i) : view_(view), i_(i) {}
    /// The element.
    const T& operator*() const { return (*view_)[i_]; }
    const T* operator->() const { return &(*view_)[i_]; }
    iterator& operator++() { ++i_; return *this; }
    /// Whether two iterators are at the same element.
    bool operator==(const iterator& other) const { return i_ == other.i_; }
    bool operator!=(const iterator& other) const { return i_ != other.i_; }

   private:
    const TableView* view_;
    size_t i_;
  };
  /// The first element.
  iterator begin() const { return {this, 0}; }
  /// Past the last element.
  iterator end() const { return {this, size_}; }

 private:
  const void* table_;
  size_t size_;
  Accessor at_;
};

/// Resource limits for reading a file (docs/security.md). Whatever a file
/// holds, they bound the time and memory reading it takes; a file beyond one
/// fails with Error(kLimit) naming the field. The defaults are far above
/// what torch.save writes; raise one to read a sound file that is simply
/// that large (on the command line: --limit NAME=VALUE).
struct ReadLimits {
  /// Bytes of the object pickle (data.pkl) after inflating; it is held in
  /// memory, except the payloads OpenOptions::leave_payloads_in_file leaves
  /// in the file, which count only once they are read in.
  uint64_t max_pickle_bytes = uint64_t{1} << 30;
  /// Values, MARKs and memo entries the pickle reader holds at once (popped
  /// values are freed). 0: 2 per byte of the file, plus 2^20.
  uint64_t max_pickle_values = 0;
  /// Nesting depth of the object graph: steps from the root to any value.
  uint64_t max_depth = 1000;
  /// Bytes of a global's module and of its name.
  uint64_t max_name_bytes = 1024;
  /// Work, and memory, of one walk over the object graph, which visits a
  /// value shared by several paths once per path: a visit costs a step, plus
  /// one per element of its path and per 16 bytes of the path's text, plus
  /// one per child of the value and per 16 bytes of its keys (what a visitor
  /// may keep of it). 0: 16 per value of the graph, plus 2^21.
  uint64_t max_walk_steps = 0;
  /// The deflated records of an archive may inflate, together, to this many
  /// times the file's size (0: no limit) ...
  uint64_t max_inflate_ratio = 100;
  /// ... or to this many bytes, whichever is more.
  uint64_t inflate_allowance_bytes = uint64_t{64} << 20;
  /// Bytes the deflated records of an archive may inflate to, together, at most.
  uint64_t max_inflated_bytes = uint64_t{256} << 30;
  /// Storages of a checkpoint (records of a zip archive, beyond a few).
  uint64_t max_storages = uint64_t{1} << 18;

  /// Sets the field called `name` ("max_depth", ...); false if there is none.
  bool set(std::string_view name, uint64_t value);
  /// The names of the fields, for messages.
  static std::vector<std::string_view> names();
};

/// Options for opening a checkpoint.
struct OpenOptions {
  ReadLimits limits;  ///< what reading the file may cost at most
  /// For a checkpoint that goes through apply_passes with `weights_only`:
  /// a str or bytes of 1 MiB or more in a stored (not deflated) data.pkl is
  /// not read into memory, so that the repair makes a numpy array's storage
  /// straight from its bytes in the file and memory stays flat however
  /// large the array. apply_passes reads in every such payload still in the
  /// object graph (in the order they are needed, so memory then grows with
  /// those), so everything after it sees the same values as without this;
  /// save, save_safetensors, diff_checkpoints and select_state_dict do the
  /// same for a checkpoint that never went through apply_passes. Payloads
  /// read in count against ReadLimits::max_pickle_bytes.
  bool leave_payloads_in_file = false;
  /// For a large pickle (a state dict of some 100,000 tensors and more):
  /// the memory of the values it makes is made on a second thread while it
  /// is read, which makes the read faster where another core is free (half
  /// its time was the first touch of that memory). Off where the other
  /// cores are busy with work that matters more (the CLI reads a --like
  /// reference beside its input, with this off).
  bool make_values_ahead = true;
};

/// An opened checkpoint. Movable, not copyable.
class Checkpoint {
 public:
  /// Opens `path`, detecting the format. Throws ckptfix::Error naming the
  /// file and, where known, the record, offset or key.
  static Checkpoint open(const std::filesystem::path& path, const OpenOptions& options = {});
  /// Opens a checkpoint held in memory; `name` is used in messages.
  static Checkpoint from_bytes(std::string bytes, std::string name, const OpenOptions& options = {});

  /// Checkpoints move (the mapped file goes with them) and do not copy.
  Checkpoint(Checkpoint&&) noexcept;
  /// Moves `other` into this one.
  Checkpoint& operator=(Checkpoint&& other) noexcept;
  ~Checkpoint();

  /// The path as given to open().
  const std::string& file_name() const;
  /// The limits it was opened with (a file written from it is verified with them).
  const ReadLimits& read_limits() const;
  /// Bytes of the input file.
  uint64_t file_size() const;
  /// The container format of the input.
  CheckpointFormat format() const;
  /// The zip archive's root folder ("archive", "model", ...); empty for legacy files.
  const std::string& archive_root() const;
  /// Byte order of the tensor data in the input ("little" unless a byteorder record says "big").
  bool big_endian() const;
  /// Protocol of the object pickle (2 for everything torch.save writes by default).
  int pickle_protocol() const;
  /// Names of the zip records, in archive order (empty for legacy files).
  std::vector<std::string> record_names() const;
  /// The shard files a shard index names, in the order they were read
  /// (empty for single files); a ZeRO checkpoint's other files (optimizer
  /// files, then other ranks' model states).
  std::vector<std::string> shard_files() const;
  /// For a DeepSpeed ZeRO checkpoint, what its files say of the run.
  const std::optional<ZeroRunInfo>& zero_run() const;
  /// A safetensors file's `__metadata__` (key, value) pairs in header order;
  /// nullopt when it has none (and for torch files).
  const std::optional<std::vector<std::pair<std::string, std::string>>>& safetensors_metadata() const;

  /// The storages, in the order the input's pickle first names them.
  TableView<StorageInfo> storages() const;
  /// The tensors, in the order the input's pickle builds them.
  TableView<TensorInfo> tensors() const;
  /// Every global the pickle names, in order of first appearance (for legacy
  /// files, in any of its five pickles).
  const std::vector<GlobalRef>& globals() const;
  /// Every global reachable from the root now (after passes and extraction),
  /// judged, with the use the output's pickle would make of it, in order of
  /// first appearance: what a file written from it asks its loader to do.
  std::vector<GlobalRef> reachable_globals() const;
  /// Every opcode the checkpoint's pickles use (all five of a legacy file).
  const OpcodeSet& pickle_opcodes() const;

  /// Every tensor position, in pickle order (computed from the current graph).
  std::vector<TensorPosition> tensor_positions() const;
  /// Every state dict reachable from the root (computed from the current graph).
  std::vector<StateDictInfo> state_dicts() const;

  /// Reads bytes [offset, offset + out.size()) of a storage as the input
  /// holds them converted to little-endian (the order every writer uses).
  void read_storage(size_t storage, uint64_t offset, Span<std::byte> out) const;
  /// A zero-copy view of a stored, little-endian storage's bytes in the
  /// mapped file, or an empty span when the storage is deflated or big-endian.
  Span<const std::byte> map_storage(size_t storage) const;
  /// The path of the file StorageSource::offset is an offset into: the
  /// checkpoint's own, or one of a shard set's shards; empty when there is
  /// none (built in memory, a zip inside a distributed checkpoint's
  /// .distcp file, a tensor assembled from its chunks).
  std::string storage_file(size_t storage) const;
  /// Keeps the mapped file alive (for zero-copy views that outlive the Checkpoint).
  std::shared_ptr<const void> mapping_owner() const;

  /// A storage's bytes in a private, copy-on-write mapping of the file that
  /// was opened (writes change memory only, never the file), for callers that
  /// hand out writable tensors without copying.
  struct PrivateBytes {
    Span<std::byte> bytes;        ///< empty when the storage is not stored little-endian in a file
    std::shared_ptr<void> owner;  ///< keeps the mapping alive
  };
  /// The private bytes of `storage` (see PrivateBytes).
  PrivateBytes map_storage_private(size_t storage) const;

 private:
  friend struct CheckpointAccess;  // ckptfix's own readers, passes and writer (src/model/checkpoint_impl.h)
  explicit Checkpoint(std::unique_ptr<CheckpointImpl> impl);
  std::unique_ptr<CheckpointImpl> impl_;
};

}  // namespace ckptfix

// Writing a checkpoint as a torch zip file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/nested.h"
#include "ckptfix/outputs.h"
#include "ckptfix/verify.h"

namespace ckptfix {

/// Options for writing.
struct SaveOptions {
  /// Root folder inside the zip. Empty: keep the input's (zip inputs), or
  /// "archive" (legacy inputs), the name torch uses when saving to a buffer.
  std::string archive_root;
  /// Replace an existing output file.
  bool overwrite = false;
  /// What the write may not touch, what it records on its output, and
  /// whether an identical output already there is kept (outputs.h).
  OutputPolicy policy;
  /// fsync the new file before the rename and its directory after, for
  /// durability across power loss (the rename is atomic either way).
  bool sync = false;
  /// Called as tensor bytes are written ("writing") and, through
  /// verify_options, read back ("verifying"): (phase, bytes done, bytes total).
  ProgressCallback progress;
  /// Write the pickle as LibTorch's unpickler needs it (8-byte LONG1s); use
  /// with PassOptions::for_libtorch.
  bool libtorch_pickle = false;
  /// Verify the finished temporary file before it replaces anything
  /// (see verify.h). Off only on request.
  bool verify = true;
  VerifyOptions verify_options;  ///< what verification does (GPU load test, limits)
  /// Globals the output may call though ckptfix does not know them as data:
  /// fnmatch patterns on "module.qualname" ("mypkg.*"). By default none:
  /// save() refuses a checkpoint whose pickle would call such a global
  /// (see unknown_calls), since loading the output with weights_only=False
  /// would run it.
  std::vector<std::string> allow_globals;
  /// Threads a write may use at once, the caller's among them: large
  /// records are split among them (docs/performance.md, "Every core").
  /// 0: one per core, at most 16 (each holds about 2.5 MiB of buffers, and
  /// past that the file's write lock in the kernel is what they wait for).
  /// 1: everything on the caller's thread.
  unsigned threads = 0;
  /// Where save() leaves what it made and is done with but takes a while
  /// to free: the written file as its verification read it back (for
  /// 100,000 tensors about 1.5 million values, which take a tenth of the
  /// save to free). Unset: freed before save() returns. A program that can
  /// free it later, or on another thread, takes it here (the CLI does).
  std::function<void(std::shared_ptr<void> done_with)> dispose;
};

/// One storage as written: where it went and what it holds.
struct WrittenStorage {
  size_t storage = 0;       ///< index into Checkpoint::storages()
  std::string key;          ///< its key in the output ("0", "1", ...)
  std::string record;       ///< "<root>/data/<key>"
  uint64_t nbytes = 0;
  uint32_t crc32 = 0;
  uint64_t hash = 0;        ///< record hash of the written bytes (when has_hash): XXH3-64 of their 1 MiB pieces' XXH3-64s (docs/verification.md)
  bool has_hash = true;     ///< false for bytes copied unchanged, checked by CRC-32 against the input's, and for every storage when verify is false
  uint64_t overflowed = 0;  ///< cast: finite values that became ±inf
  uint64_t flushed = 0;     ///< cast: non-zero values that became ±0
};

/// What a write produced.
struct SaveResult {
  uint64_t bytes = 0;  ///< size of the output file
  std::string archive_root;  ///< the root folder written
  std::vector<WrittenStorage> storages;  ///< in output order
  /// Every record written, in order, with offsets (for verification).
  struct Record {
    std::string name;  ///< the record name
    uint64_t data_offset = 0;
    uint64_t size = 0;
    uint32_t crc32 = 0;
    uint64_t hash = 0;  ///< record hash of the bytes meant to be written (when has_hash; docs/verification.md)
    bool has_hash = true;  ///< false: copied unchanged, checked by CRC-32 only; or not verified (verify false: no XXH3 is made)
    bool read_back = false;  ///< its bytes were already read back and checked while writing
  };
  std::vector<Record> records;  ///< every record written, in order
  /// What verification checked (empty when it was turned off).
  std::optional<VerifyReport> verification;
  /// The output was already there with the same bytes and was kept as it
  /// was (OutputPolicy::keep_identical): nothing was replaced.
  bool kept_existing = false;
  /// The GPU load test done while reading records back during the write.
  GpuReport readback_gpu;
};

/// The globals a file written from `checkpoint` would call (GlobalUse::kCalled:
/// REDUCE, INST, OBJ, NEWOBJ with arguments, ...) though ckptfix does not
/// know them as data (GlobalKind::kUnknown), with where and how each is
/// first called (docs/security.md, "What a pickle calls").
struct UnknownCalls {
  std::vector<GlobalRef> refused;  ///< matched by no pattern: save() refuses to write
  std::vector<GlobalRef> trusted;  ///< matched by a pattern of `allow_globals`
  /// Every GlobalKind::kUnknown global the file would name, called or only
  /// held (a project's own class: its code runs on a full load), in the
  /// order the pickle first reaches them.
  std::vector<GlobalRef> unknown;
  /// What the file's nested pickles (a module's extra state holding one,
  /// nested.h) would do when its model loads them that the policy refuses:
  /// save() refuses to carry them, whatever the format.
  std::vector<NestedViolation> nested;
};

/// Judges the calls a file written from `checkpoint` (as it is now, after
/// the passes) would make, against `allow_globals` (SaveOptions::allow_globals).
/// Throws Error(kInvalidArgument) for an empty pattern.
UnknownCalls unknown_calls(const Checkpoint& checkpoint, const std::vector<std::string>& allow_globals);

/// Throws the Error(kUnsafe) that save() throws when unknown_calls refuses a
/// global: naming the checkpoint's input, each refused global with where
/// and how it is called, and the ways out (the weights-only repair, or
/// `allow_globals`). For callers that decide before save() whether to write.
void refuse_unknown_calls(const Checkpoint& checkpoint, const std::vector<std::string>& allow_globals);
/// The same, from calls unknown_calls gave for `checkpoint` as it is (one
/// walk of its graph for both).
void refuse_calls(const Checkpoint& checkpoint, const UnknownCalls& calls);
/// Throws the Error(kUnsafe) for the first of `nested` (nested_violations),
/// naming the key and what its pickle calls; nothing for none. Every writer
/// calls it, safetensors' too: a carried extra state is unpickled by the
/// model whatever file it came in.
void refuse_nested_calls(const Checkpoint& checkpoint, const std::vector<NestedViolation>& nested);

/// Writes `checkpoint` (with any edits the passes made) to `path` atomically:
/// a temporary file beside it, verified (unless options.verify is false),
/// then renamed into place. On any failure the temporary file is removed and
/// nothing else is touched. Tensor bytes are streamed from the input file;
/// memory does not grow with the checkpoint's size. Refuses, before writing
/// anything, a checkpoint whose pickle would call a global ckptfix does not
/// know as data and `options.allow_globals` does not trust (Error kUnsafe
/// naming the input, each such global and where it is called), and an
/// input whose storage records do not match their recorded CRC-32.
SaveResult save(const Checkpoint& checkpoint, const std::filesystem::path& path, const SaveOptions& options = {});

/// What save_torch_shard_set wrote.
struct TorchShardSetResult {
  /// The files, shards in order then the index; one file alone when the
  /// state dict fits in one shard (as transformers writes it then).
  std::vector<std::string> files;
  uint64_t bytes = 0;    ///< of every file written
  size_t tensors = 0;    ///< state-dict entries written
  /// Each shard's verification (empty when options.verify is false).
  std::vector<VerifyReport> verifications;
};

/// Writes `checkpoint`'s root state dict as a Hugging Face torch shard set,
/// what transformers' save_pretrained(safe_serialization=False) writes:
/// `path` names the set (DIR/pytorch_model.bin; it must end in .bin), the
/// shards are DIR/pytorch_model-00001-of-0000N.bin, each a torch.save file
/// of a state dict holding its share of the keys (split as transformers
/// splits: in order, at most `max_shard_size` bytes of storages each,
/// tensors sharing a storage in one shard), and DIR/pytorch_model.bin.index.json
/// maps each key to its shard. `reopen` gives the checkpoint again as it is
/// (the input read again, the same passes applied): each shard is written
/// from a copy of its own, its other keys taken out, so that memory stays
/// flat. Every shard is written and verified before any is renamed into
/// place, the index last; on any failure nothing is. Throws
/// Error(kInvalidArgument) when the root is not a state dict (choose one
/// with `extract`) or `path` does not end in .bin.
TorchShardSetResult save_torch_shard_set(const Checkpoint& checkpoint, const std::function<Checkpoint()>& reopen,
                                         const std::filesystem::path& path, const SaveOptions& options,
                                         uint64_t max_shard_size);

/// What save_dcp wrote.
struct DcpSaveResult {
  std::vector<std::string> files;  ///< the data file, then .metadata
  uint64_t bytes = 0;              ///< of both files
  size_t tensors = 0;              ///< tensor entries (one chunk each: the whole tensor)
  size_t values = 0;               ///< other entries, each its own torch.save
  std::optional<VerifyReport> verification;  ///< empty when options.verify is false
};

/// Writes `checkpoint`'s root dict as the directory
/// torch.distributed.checkpoint.save writes from one process, so that
/// `dcp.load(model.state_dict(), checkpoint_id=directory)` fills a model
/// and `dcp_to_torch_save` gives the dict back: `directory`/.metadata and
/// `directory`/__0_0.distcp. The dict is flattened as DCP flattens it
/// (nested dicts keyed "model.layer.weight", lists holding tensors by
/// index; a tensor is one item, any other value is one torch.save'd item).
/// Tensor bytes are streamed from the input, as save() streams them. Both
/// files are written and verified before either is renamed into place,
/// .metadata last; the directory is made when missing and an existing
/// checkpoint there is replaced only with options.overwrite. Throws
/// Error(kInvalidArgument) when the root is not a dict.
DcpSaveResult save_dcp(const Checkpoint& checkpoint, const std::filesystem::path& directory,
                       const SaveOptions& options = {});

}  // namespace ckptfix

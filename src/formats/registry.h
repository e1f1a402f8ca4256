// The formats ckptfix reads, registered in one place.
//
// A format is a reader: a test of the file's first bytes and a function that
// fills a CheckpointImpl (the model) from the whole file. open() tries them
// in order and uses the first that recognises the file; files recognised as
// a format ckptfix does not read get a specific error with a hint. Adding a
// format means a new folder beside zip/ and legacy/ code and one line in
// format_readers() (registry.cc); the passes, the writer and the CLI work on
// the model and need no change.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

#include "model/checkpoint_impl.h"

namespace ckptfix {

struct FormatReader {
  std::string_view name;  ///< "zip", "legacy", ... (for messages and docs)
  /// Whether the file, whose first bytes (up to 4 KiB) are `head`, is in
  /// this format. Cheap: it looks at signatures only.
  bool (*recognizes)(std::span<const std::byte> head);
  /// Reads the whole file into `impl` (whose `file` and `limits` are set),
  /// or throws Error naming what is wrong.
  void (*read)(CheckpointImpl& impl);
  /// Whether the format keeps its tensors in other files that it names (a
  /// shard index): such a file is never read as a file named by another
  /// (formats/named_files.h), so the graph of named files has depth one.
  bool names_files = false;
};

/// Every format, in the order open() tries them.
std::span<const FormatReader> format_readers();

/// torch >= 1.6 zip checkpoints (formats/zip_format.cc).
void read_zip_checkpoint(CheckpointImpl& impl);

/// torch < 1.6 stream checkpoints: five pickles, then raw storage data
/// (formats/legacy_format.cc).
void read_legacy_checkpoint(CheckpointImpl& impl);

/// safetensors files: a JSON header, then the tensor bytes
/// (formats/safetensors_format.cc, safetensors/header.h).
bool is_safetensors(std::span<const std::byte> file);
void read_safetensors_checkpoint(CheckpointImpl& impl);

/// Hugging Face shard-set indexes: JSON with a weight_map naming the shard
/// file of every tensor (formats/shard_index.cc).
bool is_shard_index(std::span<const std::byte> file);
void read_shard_index(CheckpointImpl& impl);

/// torch.distributed.checkpoint directories, `impl.file` being their
/// `.metadata` (formats/dcp_format.cc, formats/dcp_metadata.h).
void read_dcp_checkpoint(CheckpointImpl& impl);

/// DeepSpeed ZeRO checkpoints, `impl.file` being the rank 0 model states
/// file of a tag directory (formats/zero_format.cc).
void read_zero_checkpoint(CheckpointImpl& impl);
/// Whether `dir` is a ZeRO tag directory (it holds rank 0's model states).
bool is_zero_tag_directory(const std::filesystem::path& dir);
/// The rank 0 model states file of a ZeRO tag directory.
std::filesystem::path zero_model_states_file(const std::filesystem::path& dir);

/// Finds the file's format in the registry and reads it; refuses TorchScript
/// archives, the tar format and files that are not checkpoints with a hint.
void read_any_checkpoint(CheckpointImpl& impl);

/// read_any_checkpoint for a file named by another (formats/named_files.h):
/// a format that names files of its own is refused as a `kind` ("shard").
void read_named_checkpoint(CheckpointImpl& impl, std::string_view kind);

/// A file named by another (a shard of a set), opened as the checkpoint it
/// is (its format decided by its content, tensor views validated), in the
/// formats that keep all their bytes in that one file: a format that names
/// files (an index) is refused as `kind` ("shard"), naming what it is.
/// With `salvage` (a shard of a set being salvaged): read as salvage reads,
/// damage logged there.
Checkpoint open_named_file(std::shared_ptr<const InputFile> file, std::string_view kind, const OpenOptions& options,
                           SalvageLog* salvage = nullptr);

/// open_named_file for a file whose pickle is only read as data: nothing of
/// it is ever written out or called (a DeepSpeed ZeRO checkpoint's files,
/// from which the reader takes sizes, names and byte ranges). A known
/// gadget's global there is recorded, not refused: Python 3.11 pickles an
/// enum member as getattr(EnumClass, 'name'), as DeepSpeed's ZeroStageEnum.
Checkpoint open_data_file(std::shared_ptr<const InputFile> file, std::string_view kind, const OpenOptions& options);

/// Checkpoint::open of a file (not a directory) a save just wrote, taking `preparsed` (its
/// data.pkl parsed as it was written, or null) where the archive holds that
/// very record (model/preparsed_pickle.h).
Checkpoint open_written_checkpoint(const std::filesystem::path& path, const OpenOptions& options,
                                   PreparsedPickleSource preparsed);

/// Checkpoint::open, or with `salvage` set, the reading of salvage_checkpoint
/// (include/ckptfix/salvage.h): the readers go on past damage, logging it.
Checkpoint open_checkpoint(const std::filesystem::path& path, const OpenOptions& options, SalvageLog* salvage);

}  // namespace ckptfix

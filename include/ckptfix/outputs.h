// Where a run's outputs go, and where they never go.
//
// A run (the CLI's rewriting commands, or a program doing the same) reads
// inputs and writes one output for each: to one named file, into a
// directory that mirrors the inputs' paths, or over each input itself. An
// output's path is the input's path as it was given, mirrored under the
// directory: a symbolic link's own name, never the name of the file it
// leads to (a Hugging Face cache's `snapshots/abc/pytorch_model.bin` is a
// link to `../../blobs/9f8e7d`; its output is `OUT/pytorch_model.bin`).
//
// An OutputFence, given to a write (OutputPolicy in save.h and
// safetensors.h), refuses what a run must never do, whatever the paths
// say: replace one of its inputs (reached by any name: each input is known
// by device and inode) other than in an in-place rewrite of that input, or,
// for a run that writes into a directory, write outside it or through a
// symbolic link below it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ckptfix {

/// A file, whatever name reaches it: its device and inode.
struct FileId {
  uint64_t device = 0;
  uint64_t inode = 0;
  bool operator==(const FileId&) const = default;
  bool operator<(const FileId& o) const { return device != o.device ? device < o.device : inode < o.inode; }
};

/// The file `path` leads to (links followed), or none when there is none.
std::optional<FileId> file_id(const std::filesystem::path& path);

/// The files of a run's inputs: each input file, and each regular file
/// directly inside an input that is a directory (a distributed or DeepSpeed
/// checkpoint). Inputs that do not exist are left out.
std::set<FileId> input_file_ids(const std::vector<std::string>& inputs);

/// What a write may not do (save.h, safetensors.h: OutputPolicy::fence).
struct OutputFence {
  /// Files no write may replace: the run's inputs (input_file_ids). A
  /// write whose file is one of them fails with Error(kConflict), before
  /// anything is written.
  std::shared_ptr<const std::set<FileId>> inputs;
  /// The one of `inputs` this write may replace: the input of an in-place
  /// rewrite.
  std::optional<FileId> replaceable;
  /// When not empty: every file is written inside this directory and
  /// through no symbolic link below it. A directory below it that is a
  /// link fails the write (Error(kConflict)); a link where the file itself
  /// goes is not followed: it is an output that exists (replaced, with
  /// overwrite, by the new file; the file it led to is left alone).
  std::filesystem::path within;
};

/// What an output is made from, recorded on it by the write that makes it
/// (OutputPolicy::made_from; rerun.h says how a rerun reads it).
struct MadeFrom {
  std::string recipe;           ///< rerun.h's recipe_id(): what decides the output's bytes besides the input
  std::filesystem::path input;  ///< the input's path as given (recorded made absolute)
};

/// How a write treats its outputs' places (SaveOptions::policy,
/// SafetensorsOptions::policy): what it may not touch, what it records,
/// and what it does with an output already there besides refusing
/// (`overwrite` false) or replacing it (`overwrite` true).
struct OutputPolicy {
  OutputFence fence;
  /// Recorded on the output (the last file of a set: its index,
  /// `.metadata`) in the extended attribute `user.ckptfix.made-from`,
  /// with the stamps of the input files as read and of every file
  /// written, before it is renamed into place. Where the file system keeps
  /// no such attribute, nothing is recorded and the write goes on.
  std::optional<MadeFrom> made_from;
  /// With `overwrite` false, an output that is already there is not
  /// refused at once: the new file is written and verified as always, and
  /// if the one there has exactly its bytes, that one is kept as it is
  /// (the result says so: kept_existing) and its record set; otherwise the
  /// write fails with Error(kExists). One file only: the files of a shard
  /// set or a distributed checkpoint are refused as `overwrite` false does.
  bool keep_identical = false;
};

/// How a run places its outputs.
struct OutputPlacement {
  enum class Kind {
    kFile,       ///< one output, `path`
    kDirectory,  ///< under the directory `path`, mirroring each input's path below its argument
    kInPlace,    ///< each input rewritten
  };
  Kind kind = Kind::kFile;
  std::filesystem::path path;
  /// The format written: "pt", "safetensors", "dcp" (a directory), or ""
  /// for the one the output's name says (else the input's). A directory
  /// input (a distributed checkpoint) written as one file is named after
  /// the directory, with the extension of the format.
  std::string format;
};

/// One input of a run, as the run found it.
struct RunInput {
  std::string path;      ///< as given, or as found below a directory argument (links not resolved)
  std::string relative;  ///< its path below the directory argument it was found under, or its own name
};

/// Where `placement` puts the output of `input`. Never resolves a link: the
/// path is made of the names given and found.
std::filesystem::path output_path(const OutputPlacement& placement, const RunInput& input);

/// The format an output's name says: "safetensors", "pt" (.pt, .pth, .bin,
/// .ckpt, and .pth.tar), "" for a name without an extension, nullopt for an
/// extension ckptfix does not write.
std::optional<std::string> format_of_output_name(const std::filesystem::path& output);

}  // namespace ckptfix

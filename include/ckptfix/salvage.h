// Recovering what a damaged checkpoint still holds (`ckptfix salvage`).
//
// torch.save writes data.pkl first, then the storages one by one, then the
// small records and the zip's central directory; a file cut anywhere after
// data.pkl (a full disk, a killed job, a broken download) still describes
// the whole object and holds every storage written before the cut, each
// with its local header and CRC-32. torch cannot read it at all ("failed
// finding central directory"). salvage_checkpoint finds the records from
// their local headers, parses data.pkl as always (never executing
// anything), keeps every storage whose bytes are complete and whose CRC-32
// matches, and gives the object with every tensor whose storage is lost
// removed from its dict (or None where it is not a dict value). A record
// whose CRC does not match is lost, never kept. Legacy files cut in their
// storage section, safetensors files cut after the header, shard sets with
// missing or damaged shards and distributed checkpoints with missing or
// damaged .distcp files give what is complete in the same way.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ckptfix/checkpoint.h"

namespace ckptfix {

/// A tensor that could not be recovered.
struct LostTensor {
  std::string key;     ///< its path ('/'-separated), as inspect shows it
  std::string storage; ///< the storage (record) it needed
  uint64_t bytes = 0;  ///< the storage's bytes
  std::string reason;  ///< "cut at offset 0x1f40 (the file ends there)", "CRC-32 mismatch (...)", "file missing"
};

/// An optimizer state ({state, param_groups}) whose per-parameter state lost
/// tensors: resumed as it is, those parameters would restart their momentum
/// while the others keep theirs.
struct PartialOptimizer {
  std::string path;  ///< where it is ('/'-separated; "<root>")
  /// The parameters (keys of its `state`, as text: "3") whose state lost a tensor.
  std::vector<std::string> parameters;
  /// Whether its whole `state` was dropped (made {}), so that every
  /// parameter restarts together: SalvageOptions::keep_partial_optimizer
  /// keeps what is left instead. param_groups are kept either way.
  bool state_dropped = false;
  size_t tensors_dropped = 0;  ///< intact tensors that went with the dropped state
};

struct SalvageReport {
  /// What the tensors were found by: "central directory" or "local headers"
  /// (a torch zip whose directory is lost or damaged), "legacy storage
  /// section", "safetensors header", "shard index", ".metadata".
  std::string found_by;
  /// What else salvage decided, e.g. "record 'archive/byteorder' is damaged
  /// (...); torch's default is used instead".
  std::vector<std::string> notes;
  std::vector<std::string> recovered;  ///< keys of the tensors kept
  uint64_t recovered_bytes = 0;        ///< of their storages
  std::vector<LostTensor> lost;        ///< in the order of the object
  uint64_t lost_bytes = 0;
  /// Optimizer states that lost part of their per-parameter state.
  std::vector<PartialOptimizer> optimizers;
  /// Whether nothing was lost.
  bool complete() const { return lost.empty(); }
};

/// The recoverable part of a checkpoint, and what was lost.
struct Salvaged {
  Checkpoint checkpoint;
  SalvageReport report;
};

/// How salvage decides what it cannot keep whole.
struct SalvageOptions {
  OpenOptions open;  ///< how the file is read (limits)
  /// An optimizer state some of whose per-parameter state is lost is kept
  /// as what remains (those parameters restart their momentum when resumed,
  /// the others not), instead of having its whole `state` dropped.
  bool keep_partial_optimizer = false;
};

/// Reads what `path` still holds. Throws Error (kCorrupt) naming the file
/// when nothing can be recovered (e.g. the file is cut inside data.pkl, or
/// the safetensors header is incomplete), and the errors Checkpoint::open
/// throws for files that are not checkpoints or are dangerous.
Salvaged salvage_checkpoint(const std::filesystem::path& path, const SalvageOptions& options);
/// The same with the default SalvageOptions and these OpenOptions.
Salvaged salvage_checkpoint(const std::filesystem::path& path, const OpenOptions& options = {});

/// For the message of a file that does not open: "; ckptfix salvage can
/// recover 11 of 13 tensors" when salvage would recover something, else
/// empty. Never throws.
std::string salvage_hint(const std::filesystem::path& path, const OpenOptions& options = {});

}  // namespace ckptfix

// Writing a checkpoint's state dict as a safetensors file.
//
// The root must be a state dict (a training checkpoint: extract one first,
// PassOptions::extract). Without extra metadata the file is byte for byte
// what `safetensors.torch.save_file` writes for the same tensors: sorted by
// dtype (largest first) then name, no padding between tensors, the JSON
// header padded with spaces to a multiple of 8. Views are written as their
// own contiguous bytes; a cast planned by apply_passes is applied on the way.
// The file is written and verified like save() (save.h): a temporary file,
// the header re-read and compared, every tensor's bytes hashed, then an
// atomic rename. Memory does not grow with the checkpoint's size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckptfix/checkpoint.h"
#include "ckptfix/outputs.h"
#include "ckptfix/verify.h"

namespace ckptfix {

/// Options for writing safetensors.
struct SafetensorsOptions {
  /// Keys that are the same tensor (same storage, offset, shape, strides):
  /// keep one name per group, the first in sorted order as
  /// `safetensors.torch.save_model` does, and record each dropped name in
  /// `__metadata__` as dropped -> kept (what `load_model` re-ties). Without
  /// it every key is written, its bytes once per key.
  bool drop_aliases = false;
  /// `__metadata__` entries, after the input's own when it is a safetensors
  /// file (an entry here replaces the input's of the same key).
  std::vector<std::pair<std::string, std::string>> metadata;
  bool overwrite = false;  ///< replace an existing output file
  /// Globals trusted in the nested pickles of the extra states carried
  /// (nested.h; see SaveOptions::allow_globals): a uint8 extra state is a
  /// tensor here too, which its model unpickles, so one whose pickle calls
  /// what the policy refuses is not written unless a glob trusts it.
  std::vector<std::string> allow_globals;
  OutputPolicy policy;     ///< what the write may not touch, records, keeps (outputs.h; see SaveOptions)
  bool sync = false;       ///< fsync the file and its directory (see SaveOptions)
  bool verify = true;      ///< verify before the rename (off only on request)
  VerifyOptions verify_options;  ///< GPU load test, limits
  ProgressCallback progress;  ///< phases "writing" and "verifying"
  /// Above 0: write a Hugging Face shard set of files of at most this many
  /// bytes of tensors each (one tensor larger than that alone in a file),
  /// split as transformers' save_pretrained splits: beside `path`
  /// (DIR/model.safetensors), DIR/model-00001-of-0000N.safetensors ... and
  /// DIR/model.safetensors.index.json; each file's `__metadata__` has
  /// "format": "pt". When everything fits in one file, `path` alone is written.
  uint64_t max_shard_size = 0;
  /// Threads (see SaveOptions::threads): a safetensors file is written by at
  /// most two, the writer and the read-back; 1 keeps both on the caller's.
  unsigned threads = 0;
};

/// What a write produced.
struct SafetensorsResult {
  uint64_t bytes = 0;    ///< size of the files written
  size_t tensors = 0;    ///< tensors in them
  std::vector<std::string> files;  ///< the files written (a shard set's index last)
  /// The one file was already there with the same bytes and was kept as it
  /// was (OutputPolicy::keep_identical).
  bool kept_existing = false;
  /// Keys written more than once because they share bytes (tied weights,
  /// views of one storage), one group per storage, in state-dict order.
  std::vector<std::vector<std::string>> shared;
  /// With drop_aliases: (dropped key, key kept), in the order written to `__metadata__`.
  std::vector<std::pair<std::string, std::string>> dropped;
  std::optional<VerifyReport> verification;  ///< empty when verification was off
};

/// Writes the root state dict of `checkpoint` to `path` as safetensors (or a
/// shard set: SafetensorsOptions::max_shard_size); every file is written and
/// verified before any is renamed into place.
/// Throws Error(kInvalidArgument) when the root is not a state dict (naming
/// the state dicts there are), Error(kUnsupported) naming a tensor
/// safetensors cannot hold (complex128, complex32, quantized, bits types),
/// and what save() throws; on any failure nothing is written.
SafetensorsResult save_safetensors(const Checkpoint& checkpoint, const std::filesystem::path& path,
                                   const SafetensorsOptions& options = {});

}  // namespace ckptfix

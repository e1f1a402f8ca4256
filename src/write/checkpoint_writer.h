// Serializes a Checkpoint into a torch zip archive on any ByteSink.
//
// Records, in order: <root>/data.pkl, <root>/byteorder ("little"),
// <root>/data/0 ... data/N-1, <root>/version ("3\n"). Storages are keyed in
// the order the pickle first uses them, as torch 2.x does, and only
// storages the pickle still references are written. `.format_version` is
// deliberately omitted: torch 2.x would then compute record offsets itself
// from assumptions about miniz's exact layout.
#pragma once

#include "ckptfix/save.h"
#include "io/byte_sink.h"

namespace ckptfix {

class ReadBack;

/// Writes the archive to `sink`. The pickle is built first (it decides the
/// storage keys), then each storage is streamed from the input, or copied by
/// the kernel when it needs no change. With `readback`, every storage record
/// is read back from the file and checked on a second thread as soon as it
/// is complete (the sink must then be writing that file).
SaveResult write_checkpoint(const Checkpoint& checkpoint, ByteSink& sink, const SaveOptions& options,
                            ReadBack* readback = nullptr);

/// The data.pkl bytes and output storage order for `checkpoint`.
struct PickledObject {
  std::string bytes;
  std::vector<size_t> storage_order;  ///< storage indexes in output key order
};
PickledObject pickle_checkpoint(const Checkpoint& checkpoint, bool libtorch_pickle = false);

}  // namespace ckptfix

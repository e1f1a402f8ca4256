// Serializes a Checkpoint into a torch zip archive on any ByteSink, with the
// records the torch that wrote the input writes (the input's ArchiveStyle):
//
//   <root>/data.pkl
//   <root>/.format_version ("1"), <root>/.storage_alignment   (torch >= 2.7)
//   <root>/byteorder ("little")                               (always)
//   <root>/data/<key>...  key order (torch >= 2.7) or string order (<= 2.6)
//   <root>/version ("3\n")
//   <root>/.data/serialization_id                             (torch >= 2.1)
//
// Storages are keyed 0..N-1 in the order the pickle first uses them, as
// torch does, and only storages the pickle still references are written.
#pragma once

#include <functional>

#include "ckptfix/save.h"
#include "io/byte_sink.h"

namespace ckptfix {

class AtomicFile;
class ReadBack;
struct ArchiveStyle;
struct CheckpointImpl;
struct SaveSeams;
struct WrittenRecord;
struct Value;

/// Writes the archive to `sink`. The pickle is built first (it decides the
/// storage keys), then each storage is streamed from the input, or copied by
/// the kernel when it needs no change. With `readback`, every storage record
/// is read back from the file and checked on a second thread as soon as it
/// is complete (the sink must then be writing that file).
/// `pickle_written`, when given, is told of data.pkl as soon as it is in
/// the file (the sink flushed), before any storage record is written.
SaveResult write_checkpoint(const Checkpoint& checkpoint, ByteSink& sink, const SaveOptions& options,
                            ReadBack* readback = nullptr,
                            const std::function<void(const WrittenRecord&)>& pickle_written = {});

/// write_checkpoint of one value of `impl`'s graph (or a value built over
/// its storages), as torch.save(that value) in `style`, under
/// options.archive_root ("archive" when empty), each storage tagged with
/// `location` when one is given (else its own). Payloads left in the input
/// must have been read in (model/payloads.h).
SaveResult write_archive(const CheckpointImpl& impl, Value* object, const ArchiveStyle& style, ByteSink& sink,
                         const SaveOptions& options, ReadBack* readback = nullptr, const std::string& location = {},
                         const std::function<void(const WrittenRecord&)>& pickle_written = {});

/// The keys 0..n-1 in the order of their decimal text ("0", "1", "10",
/// "100", "11", ..., "2"): the order torch <= 2.6 writes storage records in.
std::vector<size_t> keys_in_text_order(size_t n);

/// save() up to the rename: `checkpoint` written into `out`'s temporary
/// file and verified (the caller has refused unknown calls and checked the
/// GPU asked for); `out` is not committed, so that a shard set commits its
/// files together (torch_shard_writer.cc).
SaveResult write_verified(const Checkpoint& checkpoint, AtomicFile& out, const SaveOptions& options,
                          const SaveSeams& seams);

}  // namespace ckptfix

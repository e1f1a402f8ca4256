// Writing one storage record's data, by the fastest way the storage allows:
//
//  * unchanged bytes of a stored input, into a file: copied by the kernel
//    (copy_file_range, as cp does); the expected CRC-32 is the one the input
//    archive records for them (or, if it records none, computed from the
//    input on the worker thread while the kernel copies);
//  * bytes that change (cast, byte swap) from a stored input: read through a
//    mapping of the input, converted on this thread, and CRC'd, hashed and
//    written on the worker thread, two buffers in flight;
//  * anything else (deflated records, in-memory sources, other sinks):
//    streamed on this thread (StorageCopier).
// With a ReadBack, each finished record is read back from the file on the
// worker while the next one is written.
#pragma once

#include <functional>
#include <future>
#include <vector>

#include "ckptfix/save.h"
#include "model/checkpoint_impl.h"
#include "io/byte_sink.h"
#include "io/input_file.h"
#include "verify/byte_checker.h"
#include "write/background.h"
#include "write/storage_copier.h"
#include "zip/zip_writer.h"

namespace ckptfix {

class StorageWriter {
 public:
  /// `page_phase`: kernel-copied records may keep their input's offset
  /// modulo 4096 (more padding than torch's, for faster copies).
  StorageWriter(const InputFile& input, std::shared_ptr<const InputFile> input_owner, ByteSink& sink, ZipWriter& zip,
                ReadBack* readback, bool page_phase, std::function<void(uint64_t)> progress);

  /// Writes the data of `storage` into the record `written.record`, which
  /// this begins and ends; fills written's CRC, hash and statistics.
  void write(const Storage& storage, WrittenStorage& written);

  /// Waits for every read-back check; throws the first failure.
  void finish();
  /// Whether `written`'s bytes are read back while writing (large records).
  bool reads_back(const WrittenStorage& written) const;

 private:
  bool copy_in_kernel(const Storage& s, WrittenStorage& written);
  void convert_pipelined(const Storage& s, WrittenStorage& written);
  void stream(const Storage& s, WrittenStorage& written);
  void read_back(const Storage& s, const WrittenStorage& written, bool crc_from_input);

  const InputFile& input_;
  ByteSink& sink_;
  ZipWriter& zip_;
  ReadBack* readback_;
  bool page_phase_;
  std::function<void(uint64_t)> progress_;
  StorageCopier copier_;
  std::vector<std::future<void>> checks_;
  Background worker_;  // last: joined before anything its tasks use goes away
};

}  // namespace ckptfix

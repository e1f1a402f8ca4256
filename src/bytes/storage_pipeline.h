// The byte pipeline: every storage record of an output goes through it.
//
//   source ──> [inflate] ──> [byte swap] ──> [convert] ──> CRC-32 + XXH3 ──> sink
//   (storage_reader.h)       (element_transform.h)         (output stage)
//
// A write may use `threads` threads, the caller's among them (SaveOptions::
// threads); the ways a large record goes:
//  * Copied unread: bytes that need no change, stored in the input file and
//    going to a file, are copied by the sink (FileSink::copy_from: blocks
//    shared with the input on XFS and btrfs, copy_file_range on a network
//    file system, a splice through a 1 MiB pipe otherwise). Their expected
//    CRC-32 is the one the input archive records (or, if it records none,
//    computed from the input on the worker while the sink copies); they get
//    no XXH3. Nor does anything when the output is not verified: the XXH3 is
//    made only to be compared with the bytes read back.
//  * In parts: converted records stored in the input file, into a file (a
//    sink that takes write_at):
//    every thread takes 1 MiB parts of the record and carries them through
//    every stage (read with pread, a piece at a time, converted, summed,
//    written at their place, read back), and their sums are joined in order
//    (pump_in_parts).
//  * Large records otherwise: the input is read through a mapping (inflated
//    when deflated), transformed on this thread, and the output stage runs on
//    the worker thread, up to three buffers in flight (with a ReadBack, which
//    also runs on the worker, their CRC-32 and XXH3 are made on this thread).
//  * Small records: every stage on this thread.
// The input's CRC-32 is checked against the archive's once per record
// (check_input): a damaged input is refused rather than re-saved. With a
// ReadBack, each large record is read back from the file on the worker while
// the next one is written (a copy, with more than two threads: by the worker
// and the helpers, a part each at a time; with the GPU load test, by the
// helpers while the worker loads it on the device); those written in parts, part by
// part by the thread that wrote the part, as soon as it is written, and then
// (the GPU load test) loaded on the device by the worker, in order. With one thread, the worker's tasks run on
// the caller's thread as they are given.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <future>
#include <optional>
#include <vector>

#include "model/checkpoint_impl.h"
#include "bytes/background.h"
#include "dtype_kernels/convert.h"
#include "io/byte_sink.h"
#include "io/read_window.h"
#include "io/input_file.h"
#include "zip/zip_writer.h"

namespace ckptfix {

class ReadBack;

/// The threads a write uses for SaveOptions::threads `asked`: that many, or
/// for 0 the cores this process may run on (its CPU affinity), at most 16.
unsigned write_threads(unsigned asked);

/// One storage record as written, with what it is expected to hold.
struct PipedRecord {
  WrittenRecord record;          ///< name, offsets, size, CRC-32
  std::optional<uint64_t> hash;  ///< RecordHash of the bytes written; none for unread copies (checked by CRC-32) or without `hash`
  bool read_back = false;        ///< its bytes are read back and checked while writing
  ConvertStats stats;            ///< what a cast did
};

class StoragePipeline {
 public:
  /// `page_phase`: records copied unread keep their input's offset
  /// modulo 4096 (more padding than torch's, so that their blocks can be
  /// shared with the input's where the file system can), and other large
  /// records start at a multiple of 32 KiB (large folios in the page cache).
  /// Off where torch may compute the offsets (`.format_version`).
  /// `hash`: make the XXH3 of the bytes written, for a verification (always
  /// with a `readback`; without either, nobody would compare it).
  /// `threads`: at most this many threads at once, this one among them (>= 1).
  /// `progress` gets the number of bytes each time more are in the sink.
  StoragePipeline(const CheckpointImpl& checkpoint, ByteSink& sink, ZipWriter& zip, ReadBack* readback, bool hash,
                  bool page_phase, unsigned threads, std::function<void(uint64_t)> progress);

  /// Writes `storage`'s output bytes as the record `name`, which this begins and ends.
  PipedRecord write(const Storage& storage, const std::string& name);

  /// Waits for every read-back check; throws the first failure.
  void finish();

 private:
  struct Pumped {
    uint32_t crc = 0;
    std::optional<uint64_t> hash;
    ConvertStats stats;
    bool read_back = false;  // every part already read back and checked
  };
  bool copy_unread(const Storage& s, uint32_t& crc);
  Pumped pump(const Storage& s, bool large);
  bool goes_in_parts(const Storage& s, bool large, bool identity) const;
  void start_helpers();
  Pumped pump_in_parts(const Storage& s);
  void read_back(const Storage& s, const WrittenRecord& r, std::optional<uint64_t> hash, bool crc_from_input);
  void read_back_in_parts(const WrittenRecord& r, DType device_dtype);
  void load_on_device(const Storage& s, const std::string& record, uint64_t offset, uint64_t size);
  void check_input(const Storage& s, uint32_t actual) const;
  void wrote(uint64_t n);

  static constexpr size_t kBuffers = 3;

  const CheckpointImpl& checkpoint_;  // whose input_of() holds each storage's bytes
  ByteSink& sink_;
  ZipWriter& zip_;
  ReadBack* readback_;
  bool hash_;
  bool page_phase_;
  unsigned threads_;
  std::function<void(uint64_t)> progress_;
  // Kept across records: many small storages must not each allocate them.
  std::vector<std::byte> read_buffer_;
  ReadWindow small_records_;  // the small records of stored inputs
  std::array<std::vector<std::byte>, kBuffers> buffers_;
  // pump_in_parts: each thread's input piece, output piece and part read back.
  struct Buffers {
    std::vector<std::byte> input, output, read_back;
  };
  std::vector<Buffers> per_thread_;  // [0]: this thread's; [1]: the worker's; then the helpers'
  std::vector<std::future<void>> checks_;
  // Last: joined before anything their tasks use goes away.
  std::vector<std::unique_ptr<Background>> helpers_;  // the threads beyond two: pump_in_parts, read_back_in_parts
  Background worker_;
};

}  // namespace ckptfix

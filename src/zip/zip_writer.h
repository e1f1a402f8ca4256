// Zip writer producing the layout torch's own writer (caffe2 inline_container
// over miniz) produces, so torch and other tools that assume it read the
// result the same way:
//
//  * every record stored (no compression), general purpose flags 0x0808
//    (data descriptor follows, UTF-8 names), version needed 0, DOS time 0;
//  * CRC and sizes 0 in the local header, real values in a "PK\7\8" data
//    descriptor after the data (16 bytes, 24 when zip64) and in the central
//    directory; a record of size 0 has no descriptor (flags 0x0800);
//  * each local header carries an extra field "FB" + length + 'Z' padding
//    so the record's data starts on a multiple of the alignment (64 bytes,
//    or torch's `config.save.storage_alignment`; written even when no
//    padding is needed); a zip64 extra (sizes >= 4 GiB and/or header offset
//    >= 4 GiB) precedes it;
//  * the central directory has zip64 extras only where a field overflows,
//    and the archive always ends with zip64 end record + locator + end record.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/byte_sink.h"

namespace ckptfix {

/// What was written for one record (for verification and reports).
struct WrittenRecord {
  std::string name;
  uint64_t header_offset = 0;
  uint64_t data_offset = 0;
  uint64_t size = 0;
  uint32_t crc32 = 0;
  /// The first bytes of the data (up to 8): torch's serialization id looks at them.
  std::array<std::byte, 8> head{};
  size_t head_size = 0;
};

class ZipWriter {
 public:
  static constexpr uint32_t kAlignment = 64;

  /// `alignment`: data offsets are multiples of it; a multiple of 64 of at
  /// most 65536 (the FB field's length is 16 bits), else Error(kInvalidArgument).
  explicit ZipWriter(ByteSink& sink, uint32_t alignment = kAlignment);

  /// Where a record's data goes beyond torch's alignment: at an offset
  /// congruent to `offset` modulo `modulo` (a power of two from the
  /// alignment to kMaxModulo; `offset` a multiple of the alignment).
  struct Phase {
    uint64_t offset = 0;
    uint64_t modulo = 4096;
  };
  /// The padding must fit the FB field with the zip64 one: less than 64 KiB.
  static constexpr uint64_t kMaxModulo = uint64_t{32} << 10;

  /// Starts a record of exactly `size` bytes (the size decides zip64 fields
  /// and padding up front, as torch's writer does). With `phase`, the data
  /// goes there (still aligned): a record copied from an input at the same
  /// page phase can share its whole blocks with the input's (XFS, btrfs); a
  /// record written at a multiple of 32 KiB fills whole large folios of the
  /// page cache. A phase the alignment cannot have is ignored. Without it,
  /// the padding is exactly torch's (the least that aligns the data).
  void begin(const std::string& name, uint64_t size, std::optional<Phase> phase = std::nullopt);
  /// Appends data to the current record.
  void write(std::span<const std::byte> data);
  /// Accounts for `n` bytes of the current record that were put into the
  /// sink directly (ByteSink::copy_from); their CRC must be given to end().
  void wrote_directly(uint64_t n);
  /// The first bytes of data put into the sink directly (the head of the record).
  void note_direct_head(std::span<const std::byte> head);
  /// Ends the current record (checks all `size` bytes were written). `crc`:
  /// the record's CRC-32 when its bytes did not all go through write().
  void end(std::optional<uint32_t> crc = std::nullopt);
  /// A whole small record at once.
  void add(const std::string& name, std::span<const std::byte> data);
  /// Writes the central directory and end records.
  void finish();

  const std::vector<WrittenRecord>& records() const { return records_; }

 private:
  ByteSink& sink_;
  uint32_t alignment_;
  std::vector<WrittenRecord> records_;
  bool in_record_ = false;
  bool direct_in_record_ = false;
  uint64_t written_in_record_ = 0;
  uint32_t crc_ = 0;
  std::string extra_, header_;  // begin()'s and end()'s, reused
};

}  // namespace ckptfix

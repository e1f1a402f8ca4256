// Zip reader for torch checkpoints.
//
// Format notes (see docs/format.md for the full story):
//  * The end of central directory record (EOCD, "PK\5\6") is found by
//    scanning backwards over the last 64 KiB + 22 bytes. When a zip64
//    locator ("PK\6\7") sits just before it, the zip64 EOCD ("PK\6\6") it
//    points at is authoritative; torch always writes one.
//  * Sizes and CRCs come from the central directory: torch's local headers
//    hold zeros there (general purpose bit 3, a data descriptor follows the
//    data). Fields set to 0xFFFFFFFF are found in the zip64 extra (0x0001).
//  * The data offset comes from the local header: it is
//    header offset + 30 + name length + *local* extra length, and torch's
//    local extra (the "FB" padding field that 64-byte aligns the data) is
//    absent from the central directory.
//  * Records are found by name, never by position.
// Every offset and size read from the file is checked before use.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "io/input_file.h"

namespace ckptfix {

/// One member of the archive, as the central directory describes it.
struct ZipEntry {
  std::string name;
  uint16_t method = 0;        ///< 0 stored, 8 deflated
  uint16_t flags = 0;
  uint32_t crc32 = 0;         ///< 0 may mean "not computed" (torch >= 2.6 option)
  uint64_t compressed_size = 0;
  uint64_t size = 0;          ///< uncompressed size
  uint64_t header_offset = 0; ///< local header
  uint64_t data_offset = 0;   ///< first byte of the (compressed) data
  bool zip64 = false;         ///< sizes or offset came from a zip64 extra
};

/// Facts about the archive as a whole, for inspect and verify.
struct ZipLayout {
  uint64_t central_directory_offset = 0;
  uint64_t central_directory_size = 0;
  uint64_t eocd_offset = 0;
  bool has_zip64_eocd = false;
  uint64_t zip64_eocd_offset = 0;  ///< where the zip64 end record is (has_zip64_eocd)
};

/// What an archive may declare, checked on its directory before any record
/// is read (the fields of ReadLimits of the same names).
struct ZipLimits {
  uint64_t max_storages = UINT64_MAX;  ///< the archive may hold this many records, and a few more
  uint64_t max_inflate_ratio = 0;      ///< 0: no ratio limit
  uint64_t inflate_allowance_bytes = 0;
  uint64_t max_inflated_bytes = UINT64_MAX;
  /// Refuse an archive whose records do not follow each other with nothing
  /// between them but data descriptors (ZipReader::check_records_tile). Off
  /// for salvage, which reads a damaged archive's records by its directory
  /// and trusts each only by its CRC-32.
  bool records_must_tile = true;
};

/// The inflated bytes a zip's deflated records may declare in all, by
/// `limits` for a file of `file_size` bytes: add() throws Error(kLimit) (at
/// the record) once they declare more, so a bomb is refused before
/// anything is inflated.
class InflationBudget {
 public:
  InflationBudget(uint64_t file_size, const ZipLimits& limits);
  void add(const std::string& record, uint64_t inflated);

 private:
  uint64_t file_size_;
  ZipLimits limits_;
  uint64_t allowed_ = UINT64_MAX;
  uint64_t total_ = 0;
};

/// Names compared as torch's reader compares them: ASCII letters folded.
struct FoldedNameHash {
  size_t operator()(std::string_view name) const noexcept;
};
struct FoldedNameEqual {
  bool operator()(std::string_view a, std::string_view b) const noexcept;
};

class ZipReader {
 public:
  /// Parses the directory of `file`. Throws Error(kCorrupt) naming the
  /// structure and offset on any inconsistency, Error(kLimit) when the
  /// archive declares more than `limits` allow.
  explicit ZipReader(std::shared_ptr<const InputFile> file, const ZipLimits& limits = {});

  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipLayout& layout() const { return layout_; }
  const InputFile& file() const { return *file_; }

  /// The entry called `name`, ignoring ASCII case as torch's reader does
  /// (two names that differ only so are refused when the archive is
  /// read), or nullptr.
  const ZipEntry* find(std::string_view name) const;

  /// The whole (inflated) content of an entry, inflated into a buffer that
  /// grows with what actually comes out (never to the declared size up
  /// front). Throws if the entry declares more than max_size: Error(kLimit)
  /// naming `limit_name` when given, else Error(kCorrupt). For the records
  /// read whole (data.pkl, version, byteorder).
  std::string read_all(const ZipEntry& entry, uint64_t max_size, const char* limit_name = nullptr) const;

  /// A mapping of a stored (method 0) entry where it lies in the file,
  /// unmapped when the result goes: nothing is read until a page is touched
  /// (a pickle parsed in place never touches the large payloads it leaves in
  /// the file). Size checked as by read_all.
  MappedRange map_stored(const ZipEntry& entry, uint64_t max_size = UINT64_MAX,
                         const char* limit_name = nullptr) const;

 private:
  void read_end_records();
  void read_central_directory();
  /// Reads the zip64 extra field of `entry` (as miniz does; one that
  /// readers could read otherwise is refused).
  void read_zip64_extra(ZipEntry& entry, const std::byte* extra, uint64_t extra_len,
                        const std::function<std::string()>& where) const;
  void locate_all_data(const std::vector<size_t>& order);
  /// Throws unless the records, in file `order`, and the directory follow
  /// each other with nothing between them but data descriptors.
  void check_records_tile(const std::vector<size_t>& order) const;
  /// Finds where `entry`'s data starts from its local header, taken from
  /// `group` (the file's bytes [group_start, group_end)) where it lies there.
  void locate_data(ZipEntry& entry, const std::byte* group = nullptr, uint64_t group_start = 0,
                   uint64_t group_end = 0) const;
  void check_inflated_sizes() const;
  void check_size(const ZipEntry& entry, uint64_t max_size, const char* limit_name) const;

  std::shared_ptr<const InputFile> file_;
  ZipLimits limits_;
  ZipLayout layout_;
  uint64_t entry_count_ = 0;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string_view, size_t, FoldedNameHash, FoldedNameEqual> by_name_;
};

/// True when the first bytes are a zip local header signature.
bool looks_like_zip(std::span<const std::byte> head);

}  // namespace ckptfix

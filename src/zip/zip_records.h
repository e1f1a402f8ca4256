// The records of a torch zip that may be damaged: from its central
// directory when that reads, else found from their local headers, front to
// back; each record's bytes checked against its CRC-32 before anything
// trusts them (salvage.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/input_file.h"
#include "zip/zip_reader.h"

namespace ckptfix {

struct FoundRecord {
  std::string name;
  uint64_t data_offset = 0;
  uint64_t size = 0;      ///< bytes of the record in the file
  uint64_t uncompressed = 0;  ///< bytes of the record's content (== size when stored)
  uint16_t method = 0;    ///< 0 stored, 8 deflated
  uint32_t crc = 0;       ///< what the archive says the bytes' CRC-32 is
  bool intact = false;    ///< every byte is in the file and the CRC-32 matches
  std::string problem;    ///< why not intact ("cut at offset 0x..", "CRC-32 mismatch ...")
};

struct FoundRecords {
  std::string found_by;  ///< "central directory" or "local headers"
  std::vector<FoundRecord> records;  ///< in file order
  /// Why the scan of local headers stopped before the central directory or
  /// the end of the file ("cut at offset 0x.. (the file ends there), inside
  /// the local header at offset 0x.."), else empty: what every record not
  /// found was lost to.
  std::string stop_reason;
  std::unordered_map<std::string, size_t> by_name;  ///< index into records
  const FoundRecord* find(const std::string& name) const;
};

/// The records of `file`. `size_of(name, data_offset)` gives a record's size
/// where the local header does not (torch writes sizes after the data, in a
/// data descriptor): data.pkl's parsed length, a storage's bytes from the
/// pickle; nullopt for the small records, whose data descriptor is then
/// searched for (within 64 KiB). `limits` are those of reading (a bomb, too
/// many records: Error(kLimit), whichever way the records are found).
/// Throws Error(kCorrupt) when not even the first local header can be read.
FoundRecords find_zip_records(std::shared_ptr<const InputFile> file,
                              const std::function<std::optional<uint64_t>(const std::string&, uint64_t)>& size_of,
                              const ZipLimits& limits);

/// The content of an intact record of at most `max` bytes (inflated when
/// deflated); throws Error naming the record otherwise.
std::string read_found_record(const InputFile& file, const FoundRecord& record, uint64_t max);

}  // namespace ckptfix

// How torch's zip reader (miniz, as PyTorchStreamReader uses it in torch
// 1.13 to 2.14) reads an archive, written down apart from ckptfix's reader
// so that the zip fuzz target can hold the two against each other: for
// every archive ckptfix accepts, each record miniz would find by a name must
// be the one ckptfix finds, at the same bytes. The rules, from miniz 2.1.0 and
// 3.0.2 (mz_zip_reader_locate_header_sig, mz_zip_reader_read_central_dir,
// mz_zip_file_stat_internal, mz_zip_reader_locate_file):
//   * the end record: the last signature with 22 bytes after it, searched
//     back over the last 4096 + 16 * 4093 bytes, its comment length unread;
//   * the zip64 end record, from a locator exactly 20 bytes before it, its
//     values taken whatever the 32-bit ones say (the 32-bit ones where the
//     locator or its record's signature is missing);
//   * each directory entry's sizes and offset: the 32-bit fields, and where
//     one is 0xFFFFFFFF the next member of the first zip64 extra field
//     (size, compressed size, offset, in that order, each only if asked);
//   * the data: local header offset + 30 + the local name and extra lengths;
//   * names compared ignoring ASCII case.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckptfix::fuzz {

struct ModelEntry {
  std::string name;
  uint64_t size = 0, compressed_size = 0, header_offset = 0, data_offset = 0;
  bool data_known = false;  ///< the local header was there to read
};

/// miniz's reading of `bytes`, or nullopt where miniz would refuse to open it.
std::optional<std::vector<ModelEntry>> miniz_read(std::string_view bytes);

}  // namespace ckptfix::fuzz

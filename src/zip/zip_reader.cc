#include "zip/zip_reader.h"

#include <algorithm>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "zip/inflate.h"
#include "zip/zip_signatures.h"

namespace ckptfix {
namespace {

constexpr uint64_t kCentralHeaderSize = 46;
constexpr uint64_t kEocdSize = 22;
constexpr uint64_t kZip64EocdSize = 56;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;
// How far back from the end miniz's search for the end record reaches: it
// reads 4096-byte blocks going back 4093 bytes at a time until 65535 + 22
// bytes are behind it, so 4096 + 16 * 4093 (a little past the 65557 bytes
// of the zip specification's largest comment).
constexpr uint64_t kEndSearch = 4096 + 16 * 4093;

Error corrupt(std::string message) { return Error(ErrorKind::kCorrupt, std::move(message)); }

}  // namespace

bool looks_like_zip(std::span<const std::byte> head) {
  return head.size() >= 4 && load_le<uint32_t>(head.data()) == kZipLocalHeaderSig;
}

// Records of a torch archive besides its storages: data.pkl, version,
// byteorder, .data/version, .data/serialization_id, and room for more.
constexpr uint64_t kOtherRecords = 16;

ZipReader::ZipReader(std::shared_ptr<const InputFile> file, const ZipLimits& limits)
    : file_(std::move(file)), limits_(limits) {
  try {
    read_end_records();
    read_central_directory();
    check_inflated_sizes();
  } catch (Error& e) {
    e.in_file(file_->name());
    throw;
  }
}

void ZipReader::read_end_records() {
  const uint64_t size = file_->size();
  if (size < kEocdSize) {
    throw corrupt("zip archive is " + std::to_string(size) +
                  " bytes, too short to hold an end of central directory record; the file is truncated");
  }
  // The end record torch reads is miniz's: the last signature with 22
  // bytes after it, whatever its comment length says, searched back over
  // the last kEndSearch bytes. A reader that follows the zip specification
  // takes the one whose comment reaches the end of the file. They agree
  // only where that last record ends the file, as torch writes it; any
  // other archive is refused, for readers would see different directories.
  const uint64_t scan_start = size > kEndSearch ? size - kEndSearch : 0;
  auto tail = file_->read_bytes(scan_start, size - scan_start, "end of archive");
  uint64_t eocd = UINT64_MAX;
  for (uint64_t i = tail.size() - kEocdSize + 1; i-- > 0;) {
    if (load_le<uint32_t>(tail.data() + i) == kZipEocdSig) {
      eocd = scan_start + i;
      break;
    }
  }
  if (eocd == UINT64_MAX) {
    throw corrupt("no end of central directory record found (failed finding central directory); "
                  "the file is truncated or is not a zip archive");
  }
  const uint16_t comment_len = load_le<uint16_t>(tail.data() + (eocd - scan_start) + 20);
  if (eocd + kEocdSize + comment_len != size) {
    throw corrupt("the last end of central directory record, at offset " + hex_offset(eocd) + ", says " +
                  std::to_string(comment_len) + " bytes of comment follow it, and " +
                  std::to_string(size - eocd - kEocdSize) +
                  " do: torch's reader (miniz) and other zip readers would take different end records "
                  "(the archive is ambiguous)")
        .at("end of central directory record");
  }
  // Another end record between the directory and this one (in a comment,
  // a name or an extra field): a reader searching otherwise would take it.
  auto another_end_record = [&](uint64_t from) {
    for (uint64_t at = std::max(from, scan_start); at + 4 <= eocd; ++at) {
      if (load_le<uint32_t>(tail.data() + (at - scan_start)) == kZipEocdSig) return at;
    }
    return UINT64_MAX;
  };
  layout_.eocd_offset = eocd;
  auto rec = file_->read_bytes(eocd, kEocdSize, "end of central directory record");
  const uint16_t disk = load_le<uint16_t>(rec.data() + 4);
  const uint16_t cd_disk = load_le<uint16_t>(rec.data() + 6);
  uint64_t count = load_le<uint16_t>(rec.data() + 10);
  uint64_t cd_size = load_le<uint32_t>(rec.data() + 12);
  uint64_t cd_offset = load_le<uint32_t>(rec.data() + 16);

  // A zip64 locator immediately before the EOCD points at the zip64 EOCD.
  if (eocd >= kZip64LocatorSize) {
    auto loc = file_->read_bytes(eocd - kZip64LocatorSize, kZip64LocatorSize, "zip64 end of central directory locator");
    if (load_le<uint32_t>(loc.data()) == kZip64LocatorSig) {
      const uint64_t z64 = load_le<uint64_t>(loc.data() + 8);
      auto z = file_->read_bytes(z64, kZip64EocdSize, "zip64 end of central directory record");
      if (load_le<uint32_t>(z.data()) != kZip64EocdSig) {
        throw corrupt("zip64 end of central directory record expected at offset " + hex_offset(z64) +
                      " (from the locator) but its signature is missing");
      }
      layout_.has_zip64_eocd = true;
      layout_.zip64_eocd_offset = z64;
      const uint64_t count64 = load_le<uint64_t>(z.data() + 32);
      const uint64_t cd_size64 = load_le<uint64_t>(z.data() + 40);
      const uint64_t cd_offset64 = load_le<uint64_t>(z.data() + 48);
      if (load_le<uint64_t>(z.data() + 24) != count64) {
        throw corrupt("zip64 end record: entries on this disk differ from total entries (multi-disk archives are not supported)");
      }
      if (load_le<uint32_t>(z.data() + 16) != 0 || load_le<uint32_t>(z.data() + 20) != 0 ||
          load_le<uint32_t>(loc.data() + 4) != 0 || load_le<uint32_t>(loc.data() + 16) != 1) {
        throw corrupt("zip64 end records name other disks (multi-disk archives are not supported)");
      }
      if (z64 + kZip64EocdSize != eocd - kZip64LocatorSize) {
        throw corrupt("the zip64 end record at offset " + hex_offset(z64) + " does not end where its locator "
                      "starts: bytes no record accounts for (the archive is ambiguous)")
            .at("zip64 end of central directory record");
      }
      // miniz takes the zip64 values whatever the 32-bit ones say; a reader
      // that uses a 32-bit value where it is not 0xFFFF(FFFF) would see
      // another directory.
      if ((count != 0xFFFF && count != count64) || (cd_size != 0xFFFFFFFF && cd_size != cd_size64) ||
          (cd_offset != 0xFFFFFFFF && cd_offset != cd_offset64)) {
        throw corrupt("the end record and the zip64 end record describe different central directories "
                      "(the archive is ambiguous)")
            .at("end of central directory record");
      }
      count = count64;
      cd_size = cd_size64;
      cd_offset = cd_offset64;
    }
  }
  if (!layout_.has_zip64_eocd && (disk != 0 || cd_disk != 0)) {
    throw corrupt("multi-disk zip archives are not supported");
  }
  const auto cd_end = checked_add(cd_offset, cd_size);
  if (!cd_end || *cd_end > layout_.eocd_offset) {
    throw corrupt("central directory at offset " + hex_offset(cd_offset) + " (" + std::to_string(cd_size) +
                  " bytes) overlaps the end records or the end of the file; the file is truncated or damaged");
  }
  // Every entry needs at least a 46-byte header, so the count is bounded by the size.
  if (count > cd_size / kCentralHeaderSize) {
    throw corrupt("central directory claims " + std::to_string(count) + " entries but is only " +
                  std::to_string(cd_size) + " bytes");
  }
  if (limits_.max_storages != UINT64_MAX && count > limits_.max_storages + kOtherRecords) {
    throw Error(ErrorKind::kLimit, "the archive has " + std::to_string(count) + " records, more than " +
                                       std::to_string(limits_.max_storages) + " storages and " +
                                       std::to_string(kOtherRecords) + " others (limit max_storages = " +
                                       std::to_string(limits_.max_storages) + ")")
        .at("central directory");
  }
  if (const uint64_t other = another_end_record(cd_offset); other != UINT64_MAX) {
    throw corrupt("a second end of central directory signature lies at offset " + hex_offset(other) +
                  ", between the central directory and the end record: readers that search for it differently "
                  "would take another directory (the archive is ambiguous)")
        .at("end of central directory record");
  }
  // The directory, the zip64 end records and the end record follow each
  // other with nothing between them, as torch writes them.
  const uint64_t directory_end = *cd_end;
  const uint64_t expected_end = layout_.has_zip64_eocd ? layout_.zip64_eocd_offset : layout_.eocd_offset;
  if (directory_end != expected_end) {
    throw corrupt("the central directory ends at offset " + hex_offset(directory_end) + ", and the " +
                  (layout_.has_zip64_eocd ? "zip64 end record" : "end record") + " starts at " +
                  hex_offset(expected_end) + ": bytes no record accounts for (the archive is ambiguous)")
        .at("central directory");
  }
  layout_.central_directory_offset = cd_offset;
  layout_.central_directory_size = cd_size;
  entry_count_ = count;
}

void ZipReader::read_central_directory() {
  auto cd = file_->read_bytes(layout_.central_directory_offset, layout_.central_directory_size, "central directory");
  uint64_t pos = 0;
  entries_.reserve(entry_count_);
  for (uint64_t index = 0; index < entry_count_; ++index) {
    const uint64_t at = layout_.central_directory_offset + pos;
    auto where = [&] { return "central directory entry " + std::to_string(index) + " at offset " + hex_offset(at); };
    if (cd.size() - pos < kCentralHeaderSize) throw corrupt(where() + ": header runs past the central directory");
    const std::byte* h = cd.data() + pos;
    if (load_le<uint32_t>(h) != kZipCentralHeaderSig) throw corrupt(where() + ": bad signature (bad central directory)");
    ZipEntry e;
    e.flags = load_le<uint16_t>(h + 8);
    e.method = load_le<uint16_t>(h + 10);
    e.crc32 = load_le<uint32_t>(h + 16);
    e.compressed_size = load_le<uint32_t>(h + 20);
    e.size = load_le<uint32_t>(h + 24);
    const uint16_t name_len = load_le<uint16_t>(h + 28);
    const uint16_t extra_len = load_le<uint16_t>(h + 30);
    const uint16_t comment_len = load_le<uint16_t>(h + 32);
    e.header_offset = load_le<uint32_t>(h + 42);
    const uint16_t disk_start = load_le<uint16_t>(h + 34);
    const uint32_t external_attributes = load_le<uint32_t>(h + 38);
    const uint64_t total = kCentralHeaderSize + name_len + extra_len + comment_len;
    if (cd.size() - pos < total) throw corrupt(where() + ": name or extra field runs past the central directory");
    e.name.assign(reinterpret_cast<const char*>(h + kCentralHeaderSize), name_len);
    if (e.name.empty() || e.name.find('\0') != std::string::npos || e.name.back() == '/' ||
        (external_attributes & 0x10) != 0 || disk_start != 0) {
      // miniz "extracts" a directory entry as bytes it never wrote; torch writes none of these.
      throw corrupt(where() + ": record '" + e.name + "' is " +
                    (disk_start != 0 ? std::string("on another disk") : std::string("no file (a directory, or a name torch never writes)")));
    }
    read_zip64_extra(e, h + kCentralHeaderSize + name_len, extra_len, where);
    if (e.flags & 0x1) throw Error(ErrorKind::kUnsupported, "record '" + e.name + "' is encrypted");
    // Bits other than 3 (sizes in a data descriptor) and 11 (UTF-8 names):
    // miniz refuses some for some records only (strong encryption, patch
    // data, masked headers); torch writes none.
    if ((e.flags & ~uint16_t{0x0808}) != 0) {
      throw Error(ErrorKind::kUnsupported, "record '" + e.name + "' has general purpose flags " +
                                               hex_offset(e.flags) + " (torch writes only bits 3 and 11)");
    }
    if (e.method != 0 && e.method != 8) {
      throw Error(ErrorKind::kUnsupported, "record '" + e.name + "' uses compression method " +
                                               std::to_string(e.method) + " (only stored and deflated are supported)");
    }
    if (e.method == 0 && e.compressed_size != e.size) {
      throw corrupt(where() + ": stored record '" + e.name + "' has compressed size " +
                    std::to_string(e.compressed_size) + " != size " + std::to_string(e.size));
    }
    entries_.push_back(std::move(e));
    pos += total;
  }
  // Records in file order: writers list them so, most often.
  std::vector<size_t> order(entries_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto by_offset = [&](size_t a, size_t b) { return entries_[a].header_offset < entries_[b].header_offset; };
  if (!std::is_sorted(order.begin(), order.end(), by_offset)) std::sort(order.begin(), order.end(), by_offset);
  locate_all_data(order);
  if (limits_.records_must_tile) check_records_tile(order);
  // torch's reader finds a record by its name ignoring ASCII case (miniz's
  // binary search), and of two names it cannot tell apart it reads one no
  // rule names: such an archive is refused, and names are looked up so.
  by_name_.reserve(entries_.size());  // one table, not a rehash each time it doubles
  for (size_t i = 0; i < entries_.size(); ++i) {
    const auto [it, added] = by_name_.emplace(entries_[i].name, i);
    if (added) continue;
    const std::string& other = entries_[it->second].name;
    if (other == entries_[i].name) throw corrupt("record '" + entries_[i].name + "' appears twice in the central directory");
    throw corrupt("records '" + other + "' and '" + entries_[i].name + "' differ only in case, and torch's reader "
                  "(miniz) finds records ignoring case: which one it reads is not defined (the archive is ambiguous)");
  }
}

void ZipReader::check_records_tile(const std::vector<size_t>& order) const {
  // Every byte before the central directory belongs to a record: its local
  // header, its data, and the data descriptor after it (12 to 24 bytes,
  // where its flag bit 3 says there is one). A reader that walks the local
  // headers (a streaming unzip) would otherwise find records the directory
  // does not name, or miss some.
  uint64_t expected = 0;
  const ZipEntry* previous = nullptr;
  auto check = [&](uint64_t at, const std::string& what) {
    const uint64_t gap = at - std::min(at, expected);
    const bool described = previous != nullptr && (previous->flags & 0x8) != 0;
    const bool fits = at >= expected && (gap == 0 || (described && (gap == 12 || gap == 16 || gap == 20 || gap == 24)));
    if (fits) return;
    throw corrupt(what + " at offset " + hex_offset(at) + ": " +
                  (at < expected ? "overlaps the record before it"
                                 : std::to_string(gap) + " bytes after " +
                                       (previous != nullptr ? "record '" + previous->name + "'" : std::string("the start")) +
                                       " belong to no record") +
                  " (readers that walk the archive otherwise would see other records; the archive is ambiguous)");
  };
  for (const size_t i : order) {
    const ZipEntry& e = entries_[i];
    check(e.header_offset, "the local header of '" + e.name + "'");
    expected = e.data_offset + e.compressed_size;
    previous = &e;
  }
  check(layout_.central_directory_offset, "the central directory");
}

void ZipReader::read_zip64_extra(ZipEntry& e, const std::byte* extra, uint64_t extra_len,
                                 const std::function<std::string()>& where) const {
  // As miniz reads it (mz_zip_file_stat_internal, every torch): the first
  // zip64 extra field holds the size, the compressed size and the local
  // header's offset, in that order, each only where its 32-bit field is
  // 0xFFFFFFFF. A reader that takes the last such field, or reads a member
  // its 32-bit field does not ask for, would see other records: refused.
  const bool need_size = e.size == 0xFFFFFFFF;
  const bool need_csize = e.compressed_size == 0xFFFFFFFF;
  const bool need_offset = e.header_offset == 0xFFFFFFFF;
  const uint64_t needed = 8 * (uint64_t{need_size} + need_csize + need_offset);
  bool seen = false;
  for (uint64_t x = 0; x + 4 <= extra_len;) {
    const uint16_t id = load_le<uint16_t>(extra + x);
    const uint16_t len = load_le<uint16_t>(extra + x + 2);
    if (x + 4 + len > extra_len) throw corrupt(where() + ": extra field runs past its declared length");
    if (id == kZip64ExtraId) {
      if (seen) throw corrupt(where() + ": two zip64 extra fields (readers take different ones)");
      seen = true;
      if (needed == 0) {
        x += 4 + len;
        continue;  // nothing asks for it: no reader reads it
      }
      if (len != needed) {
        throw corrupt(where() + ": zip64 extra field of " + std::to_string(len) + " bytes where its record's "
                      "0xFFFFFFFF fields ask for " + std::to_string(needed) + " (readers would read it differently)");
      }
      const std::byte* f = extra + x + 4;
      uint64_t used = 0;
      if (need_size) e.size = load_le<uint64_t>(f + 8 * used++);
      if (need_csize) e.compressed_size = load_le<uint64_t>(f + 8 * used++);
      if (need_offset) e.header_offset = load_le<uint64_t>(f + 8 * used++);
      e.zip64 = true;
    }
    x += 4 + len;
  }
  if (needed > 0 && !seen) throw corrupt(where() + ": a size or offset of 0xFFFFFFFF without a zip64 extra field");
}

void ZipReader::locate_all_data(const std::vector<size_t>& order) {
  if (file_->in_memory()) {  // one group: the whole file, read without a copy
    const FileBytes all = file_->read_bytes(0, file_->size(), "the archive");
    for (ZipEntry& e : entries_) locate_data(e, all.data(), 0, file_->size());
    return;
  }
  // A pread per local header was a tenth of opening an archive of 100,000
  // small records. Headers are read in groups instead: entries in file
  // order, each group a run of headers at most kGapBytes apart (the
  // records between them are read too) within one read of at most
  // kGroupBytes. A record larger than a page ends its group, so the data of
  // a checkpoint of real tensors is not read here.
  constexpr uint64_t kGroupBytes = uint64_t{1} << 20;
  constexpr uint64_t kGapBytes = 4096;
  auto header_end = [&](const ZipEntry& e) {
    const auto end = checked_add(e.header_offset, kZipLocalHeaderSize + e.name.size());
    return end ? std::min(*end, file_->size()) : file_->size();
  };
  std::vector<std::byte> group;
  for (size_t first = 0; first < order.size();) {
    const uint64_t start = std::min(entries_[order[first]].header_offset, file_->size());
    uint64_t end = std::max(start, header_end(entries_[order[first]]));
    size_t last = first + 1;
    while (last < order.size() && header_end(entries_[order[last]]) - start <= kGroupBytes &&
           entries_[order[last]].header_offset <= end + kGapBytes) {
      end = std::max(end, header_end(entries_[order[last]]));
      ++last;
    }
    group.resize(static_cast<size_t>(end - start));
    file_->read(start, group, "local headers");
    for (size_t i = first; i < last; ++i) locate_data(entries_[order[i]], group.data(), start, end);
    first = last;
  }
}

void ZipReader::locate_data(ZipEntry& e, const std::byte* group, uint64_t group_start, uint64_t group_end) const {
  // The header's bytes from the group read when they lie in it; else (a
  // header past the end of the file) read alone, which names the problem.
  auto bytes_at = [&](uint64_t offset, uint64_t length, const char* what) {
    if (group != nullptr && offset >= group_start && offset <= group_end && length <= group_end - offset) {
      return FileBytes::view({group + (offset - group_start), static_cast<size_t>(length)});
    }
    return file_->read_bytes(offset, length, what + ("'" + e.name + "'"));
  };
  auto h = bytes_at(e.header_offset, kZipLocalHeaderSize, "local header of ");
  if (load_le<uint32_t>(h.data()) != kZipLocalHeaderSig) {
    throw corrupt("local header of '" + e.name + "' expected at offset " + hex_offset(e.header_offset) +
                  " (from the central directory) but its signature is missing");
  }
  const uint16_t name_len = load_le<uint16_t>(h.data() + 26);
  const uint16_t extra_len = load_le<uint16_t>(h.data() + 28);
  auto name = bytes_at(e.header_offset + kZipLocalHeaderSize, name_len, "local header name of ");
  if (as_chars(name.span()) != e.name) {
    throw corrupt("local header at offset " + hex_offset(e.header_offset) + " names '" + std::string(as_chars(name.span())) +
                  "' but the central directory says '" + e.name + "'");
  }
  e.data_offset = e.header_offset + kZipLocalHeaderSize + name_len + extra_len;
  const auto end = checked_add(e.data_offset, e.compressed_size);
  if (!end || *end > layout_.central_directory_offset) {
    throw corrupt("record '" + e.name + "' data at offset " + hex_offset(e.data_offset) + " (" +
                  std::to_string(e.compressed_size) + " bytes) runs past the start of the central directory at " +
                  hex_offset(layout_.central_directory_offset));
  }
}

InflationBudget::InflationBudget(uint64_t file_size, const ZipLimits& limits) : file_size_(file_size), limits_(limits) {
  const auto by_ratio = checked_mul(file_size, limits.max_inflate_ratio);
  allowed_ = limits.max_inflate_ratio == 0 || !by_ratio ? UINT64_MAX
                                                       : std::max(*by_ratio, limits.inflate_allowance_bytes);
}

void InflationBudget::add(const std::string& record, uint64_t inflated) {
  const auto sum = checked_add(total_, inflated);
  total_ = sum ? *sum : UINT64_MAX;
  if (total_ > limits_.max_inflated_bytes) {
    throw Error(ErrorKind::kLimit, "the archive's deflated records declare " + std::to_string(total_) +
                                       " bytes inflated (limit max_inflated_bytes = " +
                                       std::to_string(limits_.max_inflated_bytes) + ")")
        .at(record);
  }
  if (total_ > allowed_) {
    throw Error(ErrorKind::kLimit, "the archive's deflated records declare " + std::to_string(total_) +
                                       " bytes inflated, more than " + std::to_string(limits_.max_inflate_ratio) +
                                       " times the file's " + std::to_string(file_size_) +
                                       " bytes: a zip bomb? (limit max_inflate_ratio = " +
                                       std::to_string(limits_.max_inflate_ratio) + ")")
        .at(record);
  }
}

void ZipReader::check_inflated_sizes() const {
  // What the deflated records will inflate to is known from the directory:
  // refuse a bomb before inflating anything. Inflating never goes past the
  // declared size (RecordReader, read_all), so these bounds hold.
  InflationBudget budget(file_->size(), limits_);
  for (const ZipEntry& e : entries_) {
    if (e.method != 0) budget.add(e.name, e.size);
  }
}

size_t FoldedNameHash::operator()(std::string_view name) const noexcept {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the ASCII-lowercased bytes
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c);
    h *= 0x100000001b3ull;
  }
  return static_cast<size_t>(h);
}

bool FoldedNameEqual::operator()(std::string_view a, std::string_view b) const noexcept {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto fold = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; };
    if (fold(a[i]) != fold(b[i])) return false;
  }
  return true;
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

void ZipReader::check_size(const ZipEntry& entry, uint64_t max_size, const char* limit_name) const {
  if (entry.size <= max_size) return;
  const std::string what = "record is " + std::to_string(entry.size) + " bytes";
  Error e = limit_name != nullptr
                ? Error(ErrorKind::kLimit, what + " (limit " + limit_name + " = " + std::to_string(max_size) + ")")
                : Error(ErrorKind::kCorrupt, what + ", more than the " + std::to_string(max_size) +
                                                 " bytes such a record has");
  throw e.in_file(file_->name()).at(entry.name);
}

std::string ZipReader::read_all(const ZipEntry& entry, uint64_t max_size, const char* limit_name) const {
  check_size(entry, max_size, limit_name);
  const FileBytes raw = file_->read_bytes(entry.data_offset, entry.compressed_size, entry.name);
  if (entry.method == 0) return std::string(as_chars(raw.span()));
  std::string out;
  try {
    // The declared size may be a lie: grow with what comes out, in steps of
    // at most 16 MiB, and never past the declared size.
    constexpr uint64_t kStep = uint64_t{16} << 20;
    Inflater inflater(raw.span());
    uint64_t got = 0;
    while (got < entry.size && !inflater.done()) {
      const uint64_t want = std::min(entry.size - got, std::max<uint64_t>(kStep, got));
      out.resize(got + want);
      const uint64_t n = inflater.read(std::span(reinterpret_cast<std::byte*>(out.data()) + got, want));
      got += n;
      if (n < want) break;
    }
    out.resize(got);
    if (got != entry.size || !inflater.done()) {
      throw corrupt(got < entry.size ? "deflated data ends after " + std::to_string(got) +
                                           " bytes, short of the declared size " + std::to_string(entry.size)
                                     : "deflated data is longer than the declared size " + std::to_string(entry.size));
    }
  } catch (Error& e) {
    e.in_file(file_->name()).at(entry.name);
    throw;
  }
  return out;
}

MappedRange ZipReader::map_stored(const ZipEntry& entry, uint64_t max_size, const char* limit_name) const {
  check_size(entry, max_size, limit_name);
  if (entry.method != 0) throw Error(ErrorKind::kInternal, "map_stored on a deflated record").at(entry.name);
  try {
    return file_->map_range(entry.data_offset, entry.compressed_size, entry.name);
  } catch (Error& e) {
    e.in_file(file_->name());
    throw;
  }
}

}  // namespace ckptfix

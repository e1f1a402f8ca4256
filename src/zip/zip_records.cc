#include "zip/zip_records.h"

#include <algorithm>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "zip/crc32.h"
#include "zip/inflate.h"
#include "zip/zip_reader.h"
#include "zip/zip_signatures.h"

namespace ckptfix {
namespace {

constexpr uint64_t kSmallRecordSearch = uint64_t{64} << 10;  // how far a small record's descriptor is looked for
constexpr uint64_t kMaxNameBytes = 4096;
constexpr uint64_t kOtherRecords = 16;  // records beside the storages, as the zip reader allows

// CRC-32 of a record's bytes as the archive stores them (inflated first
// when deflated), read through `buffer`.
uint32_t crc_of(const InputFile& file, const FoundRecord& r, std::vector<std::byte>& buffer) {
  uint32_t crc = 0;
  if (r.method == 8) {
    // Inflated no further than the size the archive records: a record that
    // says 1 KiB but inflates to 1 TiB is damaged, not work to do.
    Inflater inflater(file, r.data_offset, r.size, r.name);
    uint64_t total = 0;
    for (uint64_t n; (n = inflater.read(buffer)) > 0;) {
      if ((total += n) > r.uncompressed) {
        throw Error(ErrorKind::kCorrupt, "inflates to more than the " + std::to_string(r.uncompressed) +
                                             " bytes the archive records");
      }
      crc = crc32_update(crc, std::span(buffer.data(), n));
    }
    if (total != r.uncompressed) {
      throw Error(ErrorKind::kCorrupt, "inflates to " + std::to_string(total) + " bytes, the archive records " +
                                           std::to_string(r.uncompressed));
    }
    return crc;
  }
  for (uint64_t done = 0; done < r.size;) {
    const uint64_t n = std::min<uint64_t>(buffer.size(), r.size - done);
    file.read(r.data_offset + done, std::span(buffer.data(), n), r.name);
    crc = crc32_update(crc, std::span(buffer.data(), n));
    done += n;
  }
  return crc;
}

// Checks `r`'s bytes against its CRC-32; marks it intact or says why not.
void check(const InputFile& file, FoundRecord& r, std::vector<std::byte>& buffer) {
  try {
    const uint32_t actual = crc_of(file, r, buffer);
    r.intact = actual == r.crc;
    if (!r.intact) r.problem = "CRC-32 mismatch (the bytes have " + hex_offset(actual) + ", the archive records " + hex_offset(r.crc) + ")";
  } catch (const Error& e) {
    r.intact = false;
    r.problem = e.message();
  }
}

std::string cut_at(uint64_t offset) {
  return "cut at offset " + hex_offset(offset) + " (the file ends there)";
}

// The data descriptor after `size` bytes of data at `data`, if it is there
// and says that size: (its CRC-32, its length).
std::optional<std::pair<uint32_t, uint64_t>> descriptor_at(const InputFile& file, uint64_t data, uint64_t size) {
  const uint64_t at = data + size;
  if (at > file.size()) return std::nullopt;
  const uint64_t avail = std::min<uint64_t>(24, file.size() - at);
  const FileBytes d = file.read_bytes(at, avail, "data descriptor");
  const auto field32 = [&](size_t k) { return load_le<uint32_t>(d.data() + k); };
  const auto field64 = [&](size_t k) { return load_le<uint64_t>(d.data() + k); };
  for (const size_t sig : {size_t{4}, size_t{0}}) {  // with the optional signature, then without
    if (sig == 4 && (avail < 4 || field32(0) != kZipDescriptorSig)) continue;
    if (avail >= sig + 12 && field32(sig + 4) == size && field32(sig + 8) == size) {
      return std::make_pair(field32(sig), sig + 12);
    }
    if (avail >= sig + 20 && field64(sig + 4) == size && field64(sig + 12) == size) {
      return std::make_pair(field32(sig), sig + 20);
    }
  }
  return std::nullopt;
}

// A small record's size: the distance to the first descriptor (with its
// signature) that names it, within kSmallRecordSearch.
std::optional<uint64_t> search_descriptor(const InputFile& file, uint64_t data) {
  if (data >= file.size()) return std::nullopt;
  const uint64_t span = std::min(kSmallRecordSearch + 24, file.size() - data);
  const FileBytes bytes = file.read_bytes(data, span, "record");
  for (uint64_t k = 0; k + 16 <= span; ++k) {
    if (load_le<uint32_t>(bytes.data() + k) != kZipDescriptorSig) continue;
    if (load_le<uint32_t>(bytes.data() + k + 8) == k && load_le<uint32_t>(bytes.data() + k + 12) == k) return k;
    if (k + 24 <= span && load_le<uint64_t>(bytes.data() + k + 8) == k) return k;
  }
  return std::nullopt;
}

FoundRecords from_central_directory(std::shared_ptr<const InputFile> file, const ZipLimits& limits,
                                    std::vector<std::byte>& buffer) {
  ZipLimits damaged = limits;
  damaged.records_must_tile = false;  // a damaged local header: its record's CRC-32 says it is lost
  const ZipReader zip(file, damaged);  // refuses bombs and too many records, as reading does
  FoundRecords out;
  out.found_by = "central directory";
  for (const ZipEntry& e : zip.entries()) {
    FoundRecord r{e.name, e.data_offset, e.compressed_size, e.size, e.method, e.crc32, false, {}};
    check(*file, r, buffer);
    out.records.push_back(std::move(r));
  }
  return out;
}

FoundRecords from_local_headers(const InputFile& file,
                                const std::function<std::optional<uint64_t>(const std::string&, uint64_t)>& size_of,
                                const ZipLimits& limits, std::vector<std::byte>& buffer) {
  FoundRecords out;
  out.found_by = "local headers";
  // The limits of reading, kept as the records are found: a bomb or an
  // archive of millions of records is refused, not worked through.
  InflationBudget inflation(file.size(), limits);
  uint64_t pos = 0;
  while (pos < file.size()) {
    if (limits.max_storages != UINT64_MAX && out.records.size() > limits.max_storages + kOtherRecords) {
      throw Error(ErrorKind::kLimit, "the archive has more than " + std::to_string(out.records.size()) +
                                         " records (limit max_storages = " + std::to_string(limits.max_storages) + ")")
          .at("local header at offset " + hex_offset(pos));
    }
    if (file.size() - pos < kZipLocalHeaderSize) {
      out.stop_reason = cut_at(file.size()) + ", inside the local header at offset " + hex_offset(pos);
      break;
    }
    const FileBytes h = file.read_bytes(pos, kZipLocalHeaderSize, "local header");
    const uint32_t sig = load_le<uint32_t>(h.data());
    if (sig == kZipCentralHeaderSig) break;  // the records end where the directory starts
    if (sig != kZipLocalHeaderSig) {
      if (out.records.empty()) throw Error(ErrorKind::kCorrupt, "no zip local header at offset 0: not a torch zip checkpoint");
      out.stop_reason = "no local header at offset " + hex_offset(pos) + ", so no record after it can be found (damaged)";
      break;
    }
    const uint16_t flags = load_le<uint16_t>(h.data() + 6);
    const uint16_t method = load_le<uint16_t>(h.data() + 8);
    const uint32_t crc = load_le<uint32_t>(h.data() + 14);
    const uint32_t csize = load_le<uint32_t>(h.data() + 18);
    const uint32_t usize = load_le<uint32_t>(h.data() + 22);
    const uint16_t name_len = load_le<uint16_t>(h.data() + 26);
    const uint16_t extra_len = load_le<uint16_t>(h.data() + 28);
    if (name_len == 0 || name_len > kMaxNameBytes || (method != 0 && method != 8)) {
      out.stop_reason = "the local header at offset " + hex_offset(pos) +
                        " is damaged, so no record after it can be found";
      break;
    }
    if (pos + kZipLocalHeaderSize + name_len + extra_len > file.size()) {
      out.stop_reason = cut_at(file.size()) + ", inside the local header at offset " + hex_offset(pos);
      break;
    }
    FoundRecord r;
    r.name = std::string(as_chars(file.read_bytes(pos + kZipLocalHeaderSize, name_len, "local header name").span()));
    r.method = method;
    r.data_offset = pos + kZipLocalHeaderSize + name_len + extra_len;
    const bool sizes_in_header = (flags & 0x8) == 0 && csize != 0xFFFFFFFF;
    if (sizes_in_header) {
      r.size = csize;
      r.uncompressed = usize;
      r.crc = crc;
    } else {
      std::optional<uint64_t> size = size_of(r.name, r.data_offset);
      if (!size && method == 0) size = search_descriptor(file, r.data_offset);
      if (!size) {  // the record's end cannot be found: it, and whatever follows, is lost
        r.problem = r.data_offset >= file.size() ? cut_at(file.size()) : "its end cannot be found (damaged)";
        out.stop_reason = "the record at offset " + hex_offset(pos) + " before it is lost (" + r.problem + ")";
        out.records.push_back(std::move(r));
        break;
      }
      r.size = r.uncompressed = *size;
    }
    // data_offset is within the file (checked with the header above); a size
    // from a hostile pickle may be near 2^64, so the sum is never formed.
    if (r.size > file.size() - r.data_offset) {
      r.problem = cut_at(file.size());
      out.stop_reason = r.problem;
      out.records.push_back(std::move(r));
      break;
    }
    uint64_t descriptor = 0;
    if (!sizes_in_header) {  // the CRC-32, and the end of the record, are in the descriptor after the bytes
      const auto d = descriptor_at(file, r.data_offset, r.size);
      if (!d) {
        // A descriptor is 16 or 24 bytes: a file ending within them is cut there.
        r.problem = file.size() - (r.data_offset + r.size) < 24 ? cut_at(file.size()) + ", inside its data descriptor"
                                                                : "no data descriptor after its bytes (damaged)";
        out.stop_reason = "the record at offset " + hex_offset(pos) + " before it is lost (" + r.problem + ")";
        out.records.push_back(std::move(r));
        break;
      }
      r.crc = d->first;
      descriptor = d->second;
    }
    if (r.method == 8) inflation.add(r.name, r.uncompressed);
    check(file, r, buffer);
    pos = r.data_offset + r.size + descriptor;
    out.records.push_back(std::move(r));
  }
  return out;
}

}  // namespace

std::string read_found_record(const InputFile& file, const FoundRecord& r, uint64_t max) {
  if (!r.intact) throw Error(ErrorKind::kCorrupt, "record is damaged: " + r.problem).at(r.name);
  if (r.uncompressed > max) {
    throw Error(ErrorKind::kCorrupt, "record holds " + std::to_string(r.uncompressed) + " bytes, more than the " +
                                         std::to_string(max) + " it may").at(r.name);
  }
  std::string out(r.uncompressed, '\0');
  const std::span<std::byte> into(reinterpret_cast<std::byte*>(out.data()), out.size());
  if (r.method == 8) {
    Inflater inflater(file, r.data_offset, r.size, r.name);
    uint64_t done = 0;
    for (uint64_t n; done < out.size() && (n = inflater.read(into.subspan(done))) > 0;) done += n;
    out.resize(done);
  } else {
    file.read(r.data_offset, into, r.name);
  }
  return out;
}

const FoundRecord* FoundRecords::find(const std::string& name) const {
  const auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : &records[it->second];
}

FoundRecords find_zip_records(std::shared_ptr<const InputFile> file,
                              const std::function<std::optional<uint64_t>(const std::string&, uint64_t)>& size_of,
                              const ZipLimits& limits) {
  FoundRecords out;
  std::vector<std::byte> buffer(size_t{1} << 20);
  try {
    out = from_central_directory(file, limits, buffer);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kCorrupt) throw;  // a limit is a limit, not damage
    out = from_local_headers(*file, size_of, limits, buffer);  // no directory (cut, damaged): the local headers, in order
  }
  // Names are not covered by any CRC: a damaged name can make one record
  // pass for another of the same size. Two records of one name mean one of
  // them is damaged, and neither is trusted.
  std::unordered_map<std::string, size_t> count;
  for (const FoundRecord& r : out.records) ++count[r.name];
  for (size_t i = 0; i < out.records.size(); ++i) {
    FoundRecord& r = out.records[i];
    out.by_name.emplace(r.name, i);  // the first of a name
    if (count[r.name] > 1) {
      r.intact = false;
      r.problem = "the archive holds " + std::to_string(count[r.name]) +
                  " records of this name (a damaged name?), and neither can be trusted";
    }
  }
  return out;
}

}  // namespace ckptfix

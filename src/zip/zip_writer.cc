#include "zip/zip_writer.h"

#include <algorithm>

#include "ckptfix/error.h"
#include "io/bytes.h"
#include "zip/crc32.h"
#include "zip/zip_signatures.h"

namespace ckptfix {
namespace {

constexpr uint64_t k32 = 0xFFFFFFFF;
constexpr uint16_t kFlagsWithDescriptor = 0x0808;
constexpr uint16_t kFlagsNoDescriptor = 0x0800;
// Records from this size on are announced to the sink (ByteSink::expect),
// which may make room for their bytes first; below it, a call per record
// would cost more than it saves.
constexpr uint64_t kBulkRecord = uint64_t{1} << 20;

void put(ByteSink& sink, const std::string& bytes) { sink.write(as_bytes(bytes)); }

// A zip64 extra with the members miniz writes: usize and csize when the size
// overflows 32 bits, the header offset when that does.
std::string zip64_extra(uint64_t size, uint64_t header_offset) {
  std::string out;
  const bool big = size >= k32, far = header_offset >= k32;
  if (!big && !far) return out;
  append_le<uint16_t>(out, 0x0001);
  append_le<uint16_t>(out, static_cast<uint16_t>((big ? 16 : 0) + (far ? 8 : 0)));
  if (big) {
    append_le<uint64_t>(out, size);
    append_le<uint64_t>(out, size);
  }
  if (far) append_le<uint64_t>(out, header_offset);
  return out;
}

uint32_t clamp32(uint64_t v) { return v >= k32 ? static_cast<uint32_t>(k32) : static_cast<uint32_t>(v); }

}  // namespace

ZipWriter::ZipWriter(ByteSink& sink, uint32_t alignment) : sink_(sink), alignment_(alignment) {
  if (alignment == 0 || alignment % kAlignment != 0 || alignment > 65536) {
    throw Error(ErrorKind::kInvalidArgument,
                "zip writer: alignment " + std::to_string(alignment) + " is not a multiple of 64 up to 65536");
  }
}

void ZipWriter::begin(const std::string& name, uint64_t size, std::optional<Phase> phase) {
  if (in_record_) throw Error(ErrorKind::kInvalidArgument, "zip writer: record '" + name + "' begun inside another");
  if (name.size() > 0xFFFF) throw Error(ErrorKind::kInvalidArgument, "zip writer: record name too long");
  WrittenRecord rec;
  rec.name = name;
  rec.header_offset = sink_.position();
  rec.size = size;

  // The local zip64 extra mirrors miniz: usize and a zero csize (the real
  // sizes are in the descriptor and central directory).
  std::string& extra = extra_;  // buffers kept from record to record: a file may have 100,000
  extra.clear();
  const bool big = size >= k32, far = rec.header_offset >= k32;
  if (big || far) {
    append_le<uint16_t>(extra, 0x0001);
    append_le<uint16_t>(extra, static_cast<uint16_t>((big ? 16 : 0) + (far ? 8 : 0)));
    if (big) {
      append_le<uint64_t>(extra, size);
      append_le<uint64_t>(extra, 0);
    }
    if (far) append_le<uint64_t>(extra, rec.header_offset);
  }
  // FB padding so the data starts aligned (torch's getPadding).
  const uint64_t start = rec.header_offset + 30 + name.size() + extra.size() + 4;
  uint64_t pad = (alignment_ - start % alignment_) % alignment_;
  if (phase && phase->modulo <= kMaxModulo && (phase->modulo & (phase->modulo - 1)) == 0 &&
      alignment_ <= phase->modulo && phase->modulo % alignment_ == 0 && phase->offset % alignment_ == 0) {
    pad = (phase->offset % phase->modulo + phase->modulo - start % phase->modulo) % phase->modulo;
  }
  extra += "FB";
  append_le<uint16_t>(extra, static_cast<uint16_t>(pad));
  extra.append(pad, 'Z');

  std::string& header = header_;
  header.clear();
  append_le<uint32_t>(header, kZipLocalHeaderSig);
  append_le<uint16_t>(header, 0);  // version needed (miniz: 0 for stored)
  append_le<uint16_t>(header, size ? kFlagsWithDescriptor : kFlagsNoDescriptor);
  append_le<uint16_t>(header, 0);  // stored
  append_le<uint16_t>(header, 0);  // time
  append_le<uint16_t>(header, 0);  // date
  append_le<uint32_t>(header, 0);  // crc: in the descriptor
  append_le<uint32_t>(header, 0);  // compressed size: in the descriptor
  append_le<uint32_t>(header, 0);  // size: in the descriptor
  append_le<uint16_t>(header, static_cast<uint16_t>(name.size()));
  append_le<uint16_t>(header, static_cast<uint16_t>(extra.size()));
  header += name;
  header += extra;
  put(sink_, header);
  if (size >= kBulkRecord) sink_.expect(size);
  rec.data_offset = sink_.position();
  records_.push_back(std::move(rec));
  in_record_ = true;
  direct_in_record_ = false;
  written_in_record_ = 0;
  crc_ = 0;
}

void ZipWriter::write(std::span<const std::byte> data) {
  WrittenRecord& rec = records_.back();
  if (!in_record_ || data.size() > rec.size - written_in_record_) {
    throw Error(ErrorKind::kInvalidArgument, "zip writer: more bytes than declared for '" + rec.name + "'");
  }
  crc_ = crc32_update(crc_, data);
  if (written_in_record_ < rec.head.size()) {
    const size_t n = std::min(rec.head.size() - static_cast<size_t>(written_in_record_), data.size());
    std::copy_n(data.begin(), n, rec.head.begin() + static_cast<std::ptrdiff_t>(written_in_record_));
    rec.head_size = static_cast<size_t>(written_in_record_) + n;
  }
  sink_.write(data);
  written_in_record_ += data.size();
}

void ZipWriter::wrote_directly(uint64_t n) {
  WrittenRecord& rec = records_.back();
  if (!in_record_ || n > rec.size - written_in_record_) {
    throw Error(ErrorKind::kInvalidArgument, "zip writer: more bytes than declared for '" + rec.name + "'");
  }
  written_in_record_ += n;
  direct_in_record_ = true;
}

void ZipWriter::note_direct_head(std::span<const std::byte> head) {
  WrittenRecord& rec = records_.back();
  rec.head_size = std::min(head.size(), rec.head.size());
  std::copy_n(head.begin(), rec.head_size, rec.head.begin());
}

void ZipWriter::end(std::optional<uint32_t> crc) {
  WrittenRecord& rec = records_.back();
  if (!in_record_ || written_in_record_ != rec.size) {
    throw Error(ErrorKind::kInvalidArgument, "zip writer: record '" + rec.name + "' declared " + std::to_string(rec.size) +
                                                 " bytes but got " + std::to_string(written_in_record_));
  }
  if (direct_in_record_ && !crc) {
    throw Error(ErrorKind::kInvalidArgument, "zip writer: record '" + rec.name + "' was copied directly but has no CRC");
  }
  rec.crc32 = crc.value_or(crc_);
  in_record_ = false;
  if (rec.size == 0) return;  // miniz writes no descriptor for empty records
  std::string& desc = header_;
  desc.clear();
  append_le<uint32_t>(desc, kZipDescriptorSig);
  append_le<uint32_t>(desc, rec.crc32);
  if (rec.size >= k32 || rec.header_offset >= k32) {
    append_le<uint64_t>(desc, rec.size);
    append_le<uint64_t>(desc, rec.size);
  } else {
    append_le<uint32_t>(desc, static_cast<uint32_t>(rec.size));
    append_le<uint32_t>(desc, static_cast<uint32_t>(rec.size));
  }
  put(sink_, desc);
}

void ZipWriter::add(const std::string& name, std::span<const std::byte> data) {
  begin(name, data.size());
  write(data);
  end();
}

void ZipWriter::finish() {
  if (in_record_) throw Error(ErrorKind::kInvalidArgument, "zip writer: finished inside a record");
  const uint64_t cd_offset = sink_.position();
  std::string cd;
  for (const WrittenRecord& rec : records_) {
    const std::string extra = zip64_extra(rec.size, rec.header_offset);
    append_le<uint32_t>(cd, kZipCentralHeaderSig);
    append_le<uint16_t>(cd, 0);  // version made by
    append_le<uint16_t>(cd, 0);  // version needed
    append_le<uint16_t>(cd, rec.size ? kFlagsWithDescriptor : kFlagsNoDescriptor);
    append_le<uint16_t>(cd, 0);  // stored
    append_le<uint16_t>(cd, 0);  // time
    append_le<uint16_t>(cd, 0);  // date
    append_le<uint32_t>(cd, rec.crc32);
    append_le<uint32_t>(cd, clamp32(rec.size));
    append_le<uint32_t>(cd, clamp32(rec.size));
    append_le<uint16_t>(cd, static_cast<uint16_t>(rec.name.size()));
    append_le<uint16_t>(cd, static_cast<uint16_t>(extra.size()));
    append_le<uint16_t>(cd, 0);  // comment
    append_le<uint16_t>(cd, 0);  // disk
    append_le<uint16_t>(cd, 0);  // internal attributes
    append_le<uint32_t>(cd, 0);  // external attributes
    append_le<uint32_t>(cd, clamp32(rec.header_offset));
    cd += rec.name;
    cd += extra;
  }
  put(sink_, cd);
  const uint64_t zip64_eocd = sink_.position();
  const uint64_t count = records_.size();
  std::string end;
  append_le<uint32_t>(end, kZip64EocdSig);
  append_le<uint64_t>(end, 44);      // size of the rest of this record
  append_le<uint16_t>(end, 0x031E);  // made by (miniz: Unix, 3.0)
  append_le<uint16_t>(end, 0x002D);  // needed: 4.5 (zip64)
  append_le<uint32_t>(end, 0);
  append_le<uint32_t>(end, 0);
  append_le<uint64_t>(end, count);
  append_le<uint64_t>(end, count);
  append_le<uint64_t>(end, cd.size());
  append_le<uint64_t>(end, cd_offset);
  append_le<uint32_t>(end, kZip64LocatorSig);  // zip64 locator
  append_le<uint32_t>(end, 0);
  append_le<uint64_t>(end, zip64_eocd);
  append_le<uint32_t>(end, 1);
  append_le<uint32_t>(end, kZipEocdSig);  // end of central directory
  append_le<uint16_t>(end, 0);
  append_le<uint16_t>(end, 0);
  append_le<uint16_t>(end, static_cast<uint16_t>(count >= 0xFFFF ? 0xFFFF : count));
  append_le<uint16_t>(end, static_cast<uint16_t>(count >= 0xFFFF ? 0xFFFF : count));
  append_le<uint32_t>(end, clamp32(cd.size()));
  append_le<uint32_t>(end, clamp32(cd_offset));
  append_le<uint16_t>(end, 0);
  put(sink_, end);
}

}  // namespace ckptfix

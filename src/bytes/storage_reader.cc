#include "bytes/storage_reader.h"

#include "bytes/byte_checker.h"  // hex32
#include "bytes/element_transform.h"
#include "ckptfix/error.h"
#include "io/bytes.h"
#include "io/mapped_window.h"
#include "zip/crc32.h"

namespace ckptfix {

RecordReader open_storage_record(const InputFile& file, const Storage& storage) {
  const StorageSource& src = storage.source;
  if (src.encoding == StorageSource::Encoding::kMemory) {
    return RecordReader(file, std::span<const std::byte>(src.memory, storage.nbytes), src.record);
  }
  if (src.encoding == StorageSource::Encoding::kGathered) return RecordReader(file, storage.gather, src.record);
  const RecordEncoding encoding = src.encoding == StorageSource::Encoding::kDeflated     ? RecordEncoding::kDeflated
                                   : src.encoding == StorageSource::Encoding::kLatin1Text ? RecordEncoding::kLatin1Text
                                                                                          : RecordEncoding::kStored;
  return RecordReader(file, src.offset, src.length, encoding, storage.nbytes, src.record);
}

StorageReader::StorageReader(const InputFile& file, const Storage& storage)
    : storage_(storage), record_(open_storage_record(file, storage)) {}

uint64_t StorageReader::read(std::span<std::byte> out) {
  const uint64_t n = record_.read(out);
  if (storage_.big_endian) byteswap_in_place(out.first(n), swap_unit(storage_.dtype));
  return n;
}

void StorageReader::skip(uint64_t n) { record_.skip(n); }

WholeStorage::WholeStorage(const InputFile& file, const Storage& s) {
  if (s.source.encoding == StorageSource::Encoding::kMemory && !s.big_endian) {
    bytes_ = {s.source.memory, static_cast<size_t>(s.nbytes)};
  } else if (s.source.encoding == StorageSource::Encoding::kStored && !s.big_endian) {
    mapped_ = file.map_range(s.source.offset, s.nbytes, s.source.record);
    bytes_ = mapped_.span();
  } else {
    whole_.resize(s.nbytes);
    StorageReader reader(file, s);
    if (reader.read(whole_) != whole_.size()) {
      throw Error(ErrorKind::kCorrupt, "the storage ends before its last byte").at(s.source.record);
    }
    bytes_ = whole_;
  }
}

uint32_t input_record_crc(const InputFile& file, const Storage& s) {
  uint32_t crc = 0;
  if (s.source.encoding == StorageSource::Encoding::kStored && file.fd() >= 0) {
    for_each_mapped(file.fd(), file.name(), s.source.offset, s.source.length, s.source.record,
                    [&](std::span<const std::byte> view) { crc = crc32_update(crc, view); });
    return crc;
  }
  RecordReader reader = open_storage_record(file, s);
  std::vector<std::byte> buffer(size_t{1} << 20);
  for (uint64_t n; (n = reader.read(buffer)) > 0;) crc = crc32_update(crc, std::span(buffer.data(), n));
  return crc;
}

void check_input_record(const InputFile& file, const Storage& s, uint32_t actual) {
  if (s.source.crc32 == 0 || actual == s.source.crc32) return;
  throw Error(ErrorKind::kCorrupt, "the input record is damaged: its bytes have CRC-32 " + hex32(actual) +
                                       " but the archive records " + hex32(s.source.crc32))
      .in_file(file.name())
      .at(s.source.record);
}

}  // namespace ckptfix

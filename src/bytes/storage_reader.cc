#include "bytes/storage_reader.h"

#include "bytes/element_transform.h"
#include "ckptfix/error.h"

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

}  // namespace ckptfix
